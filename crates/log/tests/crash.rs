//! Crash tests on SimStorage: random workloads of appends at mixed degrees with sync points,
//! snapshots and segment rotation; a crash (dropping unsynced data, or tearing the last write,
//! or tearing it and adding garbage); a reopen; and the promises:
//! - every record with LSN <= the durable LSN seen just before the crash is recovered intact;
//! - every strict append whose wait returned Ok (and every `sync_now` result) is recovered;
//! - recovered records are a gap-free prefix of what was appended: no holes, no reordering,
//!   nothing invented;
//! - a background record appended longer than `background_fsync_ms` + slack before the crash
//!   is recovered (slack is generous: the machine running the tests may be loaded).
//!
//! Two seeds in three write segments as direct I/O does (every append padded with zeros to a
//! block, see `SimStorage::pad_segments`), with a small block and a 4 KiB one.

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{check_prefix, payload, recovered_state};
use gradus_log::{CrashMode, Durability, Log, LogOptions, Lsn, SimStorage};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Seeds to run: `GRADUS_CRASH_SEEDS` (default `default`) from `GRADUS_CRASH_SEED_BASE` (0),
/// so a soak run can try many more than the quick default.
fn seeds(default: u64) -> std::ops::Range<u64> {
    let var = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
    let base = var("GRADUS_CRASH_SEED_BASE").unwrap_or(0);
    base..base + var("GRADUS_CRASH_SEEDS").unwrap_or(default)
}

/// Slack over `background_fsync_ms` before a background record must have been fsynced.
const BACKGROUND_SLACK: Duration = Duration::from_millis(750);
const WAIT: Duration = Duration::from_secs(20);

fn random_opts(rng: &mut StdRng) -> LogOptions {
    let mut opts = LogOptions::new(PathBuf::from("/sim/gradus/log"));
    opts.segment_bytes = [200, 1024, 8192, 1 << 20][rng.gen_range(0..4)];
    opts.lazy_flush_ms = [0, 2, 30, 1000][rng.gen_range(0..4)];
    opts.background_fsync_ms = [0, 1, 5][rng.gen_range(0..3)];
    opts.buffer_bytes = [64, 2048, 1 << 20][rng.gen_range(0..3)];
    opts
}

fn random_degree(rng: &mut StdRng) -> Durability {
    match rng.gen_range(0..10) {
        0..=3 => Durability::Lazy,
        4..=7 => Durability::Background,
        _ => Durability::Strict,
    }
}

/// A disk for `seed`: two seeds in three pad segments like direct I/O (see the module docs).
fn disk_for(seed: u64) -> SimStorage {
    let disk = SimStorage::new(seed);
    disk.pad_segments([0, 64, 4096][(seed % 3) as usize]);
    disk
}

/// One seeded single-appender scenario: several rounds of workload → crash → reopen → check.
fn run_sequential(seed: u64, rounds: usize, ops: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let disk = disk_for(seed);
    let opts = random_opts(&mut rng);
    let background_bound = Duration::from_millis(opts.background_fsync_ms) + BACKGROUND_SLACK;
    let (mut log, rec) = Log::open(opts.clone(), Arc::new(disk.clone())).unwrap();
    assert_eq!(rec.last_lsn, 0);
    let mut model: Vec<Bytes> = Vec::new();
    for round in 0..rounds {
        let mut acked: Lsn = 0;
        let mut background: Vec<(Lsn, Instant)> = Vec::new();
        for op in 0..ops {
            match rng.gen_range(0..100) {
                0..=69 => {
                    let degree = random_degree(&mut rng);
                    let len = if rng.gen_bool(0.05) {
                        rng.gen_range(0..3000)
                    } else {
                        rng.gen_range(0..120)
                    };
                    let p = payload(&format!("s{seed}r{round}"), op as u64, len);
                    let lsn = log.append(p.clone(), degree).unwrap();
                    model.push(p);
                    assert_eq!(lsn, model.len() as u64);
                    if degree == Durability::Background {
                        background.push((lsn, Instant::now()));
                    }
                }
                70..=79 => {
                    let p = payload(
                        &format!("s{seed}r{round}w"),
                        op as u64,
                        rng.gen_range(0..80),
                    );
                    let lsn = log.append(p.clone(), Durability::Strict).unwrap();
                    model.push(p);
                    assert!(
                        log.wait_durable_blocking(lsn, WAIT).unwrap(),
                        "strict wait timed out"
                    );
                    acked = acked.max(lsn);
                }
                80..=82 => acked = acked.max(log.sync_now().unwrap()),
                83..=84 => {
                    let last = log.last_lsn();
                    let lsn = rng.gen_range(last / 2..=last);
                    log.write_snapshot(lsn, &mut model[..lsn as usize].iter().cloned())
                        .unwrap();
                }
                85..=94 => std::thread::sleep(Duration::from_micros(rng.gen_range(0..1500))),
                _ => std::thread::yield_now(),
            }
        }
        if rng.gen_bool(0.3) {
            std::thread::sleep(Duration::from_millis(rng.gen_range(0..8)));
        }
        let durable = log.durable_lsn();
        let crashed_at = Instant::now();
        let mode = CrashMode::ALL[rng.gen_range(0..CrashMode::ALL.len())];
        disk.crash(mode);
        drop(log);
        let background_due = background
            .iter()
            .filter(|(_, at)| crashed_at.duration_since(*at) > background_bound)
            .map(|(lsn, _)| *lsn)
            .max()
            .unwrap_or(0);
        let must_have = durable.max(acked).max(background_due);

        let (reopened, rec) = Log::open(opts.clone(), Arc::new(disk.reboot()))
            .unwrap_or_else(|e| panic!("seed {seed} round {round} ({mode:?}): reopen failed: {e}"));
        let kept = check_prefix(&rec, &model, must_have);
        model.truncate(kept);
        assert_eq!(reopened.last_lsn(), kept as u64);
        log = reopened;
    }
    // A clean close keeps everything.
    let p = payload("final", seed, 10);
    log.append(p.clone(), Durability::Lazy).unwrap();
    model.push(p);
    log.close().unwrap();
    let (_log, rec) = Log::open(opts, Arc::new(disk.reboot())).unwrap();
    assert_eq!(recovered_state(&rec), model);
}

#[test]
fn sequential_workloads_survive_crashes() {
    for seed in seeds(24) {
        run_sequential(seed, 4, 120);
    }
}

/// Appenders on several threads while the disk crashes under them.
fn run_concurrent(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let disk = disk_for(seed);
    let mut opts = random_opts(&mut rng);
    opts.background_fsync_ms = 2;
    let (mut log, _) = Log::open(opts.clone(), Arc::new(disk.clone())).unwrap();
    // (lsn, payload) of every append that returned Ok, from every thread.
    let mut model: Vec<Bytes> = Vec::new();
    for round in 0..3u64 {
        let appended: Arc<Mutex<Vec<(Lsn, Bytes)>>> = Arc::new(Mutex::new(Vec::new()));
        let acked = Arc::new(Mutex::new(0 as Lsn));
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..3u64)
            .map(|t| {
                let (log, appended, acked, stop) =
                    (log.clone(), appended.clone(), acked.clone(), stop.clone());
                let mut rng = StdRng::seed_from_u64(seed * 1000 + round * 10 + t);
                std::thread::spawn(move || {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let degree = random_degree(&mut rng);
                        let p = payload(&format!("c{seed}r{round}t{t}"), i, rng.gen_range(0..100));
                        i += 1;
                        let Ok(lsn) = log.append(p.clone(), degree) else {
                            break;
                        };
                        appended.lock().push((lsn, p));
                        if degree == Durability::Strict {
                            match log.wait_durable_blocking(lsn, WAIT) {
                                Ok(true) => {
                                    let mut a = acked.lock();
                                    *a = (*a).max(lsn);
                                }
                                Ok(false) => panic!("strict wait timed out"),
                                Err(_) => break, // the crash poisoned the log
                            }
                        }
                        if rng.gen_bool(0.1) {
                            std::thread::sleep(Duration::from_micros(rng.gen_range(0..500)));
                        }
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.gen_range(2..15)));
        let durable = log.durable_lsn();
        let acked_before_crash = *acked.lock();
        disk.crash(CrashMode::ALL[rng.gen_range(0..CrashMode::ALL.len())]);
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().unwrap();
        }
        drop(log);

        let mut appended = std::mem::take(&mut *appended.lock());
        appended.sort_by_key(|(lsn, _)| *lsn);
        for (lsn, p) in appended {
            assert_eq!(
                lsn,
                model.len() as u64 + 1,
                "appends got a non-contiguous LSN"
            );
            model.push(p);
        }
        let (reopened, rec) = Log::open(opts.clone(), Arc::new(disk.reboot())).unwrap();
        let kept = check_prefix(&rec, &model, durable.max(acked_before_crash));
        model.truncate(kept);
        log = reopened;
    }
    log.close().unwrap();
}

#[test]
fn concurrent_appenders_survive_crashes() {
    for seed in seeds(6) {
        run_concurrent(seed);
    }
}

#[test]
fn a_background_record_is_durable_within_its_bound() {
    let disk = SimStorage::new(99);
    let mut opts = LogOptions::new("/sim/bg");
    opts.background_fsync_ms = 10;
    opts.lazy_flush_ms = 60_000; // lazy records after it stay queued: only its own fsync helps
    let (mut log, _) = Log::open(opts.clone(), Arc::new(disk.clone())).unwrap();
    let mut model = Vec::new();
    for round in 0..3u64 {
        for i in 0..5 {
            let p = payload("lazy-before", round * 10 + i, 20);
            log.append(p.clone(), Durability::Lazy).unwrap();
            model.push(p);
        }
        let p = payload("bg", round, 20);
        let bg = log.append(p.clone(), Durability::Background).unwrap();
        model.push(p);
        let appended = Instant::now();
        for i in 0..5 {
            let p = payload("lazy-after", round * 10 + i, 20);
            log.append(p.clone(), Durability::Lazy).unwrap();
            model.push(p);
        }
        // Watch it become durable, then wait out the bound, then pull the plug.
        let deadline =
            appended + Duration::from_millis(opts.background_fsync_ms) + BACKGROUND_SLACK;
        while log.durable_lsn() < bg && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let took = appended.elapsed();
        assert!(
            log.durable_lsn() >= bg,
            "background record not durable after {took:?}"
        );
        std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
        disk.crash(CrashMode::TornWrite);
        drop(log);
        let (reopened, rec) = Log::open(opts.clone(), Arc::new(disk.reboot())).unwrap();
        let kept = check_prefix(&rec, &model, bg);
        model.truncate(kept);
        log = reopened;
    }
}

#[test]
fn a_crash_during_a_snapshot_keeps_the_previous_state() {
    // Snapshot files that never got their rename (or its directory fsync) vanish, and the
    // segments they would have replaced must still be there.
    for seed in 0..20u64 {
        let disk = SimStorage::new(seed);
        let mut opts = LogOptions::new("/sim/snapcrash");
        opts.segment_bytes = 256;
        let (log, _) = Log::open(opts.clone(), Arc::new(disk.clone())).unwrap();
        let model: Vec<Bytes> = (0..60).map(|i| payload("sc", i, 24)).collect();
        for p in &model[..30] {
            log.append(p.clone(), Durability::Background).unwrap();
        }
        log.sync_now().unwrap();
        log.write_snapshot(20, &mut model[..20].iter().cloned())
            .unwrap();
        for p in &model[30..] {
            log.append(p.clone(), Durability::Strict).unwrap();
        }
        log.sync_now().unwrap();
        // Crash at a random point inside the second snapshot: a background thread writes it
        // while the disk goes down.
        let writer = {
            let (log, model) = (log.clone(), model.clone());
            std::thread::spawn(move || {
                let _ = log.write_snapshot(50, &mut model[..50].iter().cloned());
            })
        };
        std::thread::sleep(Duration::from_micros(seed * 50));
        disk.crash(CrashMode::ALL[seed as usize % 3]);
        writer.join().unwrap();
        drop(log);
        let (_log, rec) = Log::open(opts, Arc::new(disk.reboot())).unwrap();
        assert!(
            rec.snapshot_lsn == 20 || rec.snapshot_lsn == 50,
            "{}",
            rec.snapshot_lsn
        );
        check_prefix(&rec, &model, 60);
    }
}
