//! Zero-filled segments through the whole log: the writer zero-fills segments ahead of their
//! records (a chunk at a time, never past `segment_bytes`) while waited-for commits are being
//! made, records overwrite the zeros, and recovery reads zeros after the last record as unused
//! space — after a clean close, after crashes of every kind inside the zero fill (or with the
//! fill turning on and off), and across many small segments. Outside the zero fill window
//! records are plainly appended.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{check_prefix, payload, recovered_state, TempDir};
use gradus_log::format::{self, FileKind, SEGMENT_HEADER_LEN};
use gradus_log::{CrashMode, Durability, Log, LogOptions, Lsn, OsStorage, SimStorage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The writer's zero-fill chunk (`writer::ZERO_FILL_CHUNK`).
const CHUNK: u64 = 4 << 20;

/// Options with the zero fill always on (so the tests of its mechanics see it from the open).
fn sim_opts(dir: &str, segment_bytes: u64) -> LogOptions {
    let mut opts = LogOptions::new(PathBuf::from(dir));
    opts.segment_bytes = segment_bytes;
    opts.zero_fill_window = Duration::MAX;
    opts
}

/// First LSNs of the segments in `dir` of `disk`, sorted.
fn segments(disk: &SimStorage, dir: &Path) -> Vec<Lsn> {
    let mut firsts: Vec<Lsn> = disk
        .file_names(dir)
        .iter()
        .filter_map(|n| match format::parse_file_name(n) {
            Some(FileKind::Segment(first)) => Some(first),
            _ => None,
        })
        .collect();
    firsts.sort_unstable();
    firsts
}

fn segment_file(disk: &SimStorage, dir: &Path, first: Lsn) -> Vec<u8> {
    disk.file_contents(&dir.join(format::segment_file_name(first)))
        .unwrap()
}

/// Junk (first invalid byte through the last non-zero byte) after the records of the last
/// segment in `dir`, as it is on `disk` now.
fn junk_in_last_segment(disk: &SimStorage, dir: &Path) -> u64 {
    let Some(&last) = segments(disk, dir).last() else {
        return 0;
    };
    let data = Bytes::from(segment_file(disk, dir, last));
    match format::scan_segment(&data) {
        Ok(scan) => scan.junk_len(),
        Err(_) => format::nonzero_end(&data, 0) as u64,
    }
}

#[test]
fn a_preallocated_segment_recovers_after_a_clean_close_with_no_torn_bytes() {
    let disk = SimStorage::new(1);
    let opts = sim_opts("/sim/zf/clean", LogOptions::DEFAULT_SEGMENT_BYTES);
    let dir = opts.dir.clone();
    let (log, _) = Log::open(opts.clone(), Arc::new(disk.clone())).unwrap();
    let stats = log.stats();
    assert_eq!(stats.bytes_written, SEGMENT_HEADER_LEN as u64);
    assert_eq!(stats.zero_fill_bytes, CHUNK - SEGMENT_HEADER_LEN as u64);
    // The new segment is durable with its zero fill before any record goes in.
    assert_eq!(segment_file(&disk, &dir, 1).len() as u64, CHUNK);

    let model: Vec<Bytes> = (0..100).map(|i| payload("clean", i, 50)).collect();
    for p in &model {
        log.append(p.clone(), Durability::Background).unwrap();
    }
    log.sync_now().unwrap();
    let stats = log.stats();
    let record_bytes: u64 = model.iter().map(|p| 16 + p.len() as u64).sum();
    assert_eq!(
        stats.bytes_written,
        SEGMENT_HEADER_LEN as u64 + record_bytes,
        "bytes_written counts log bytes, not zero fill"
    );
    // The first write asked for one more chunk ahead of the records.
    assert_eq!(stats.zero_fill_bytes, 2 * CHUNK - SEGMENT_HEADER_LEN as u64);
    log.close().unwrap();
    let file = segment_file(&disk, &dir, 1);
    assert_eq!(
        file.len() as u64,
        2 * CHUNK,
        "records overwrite the zero fill"
    );
    let valid = SEGMENT_HEADER_LEN + record_bytes as usize;
    assert!(file[valid..].iter().all(|&b| b == 0));

    let (log, rec) = Log::open(opts.clone(), Arc::new(disk.reboot())).unwrap();
    assert_eq!(rec.torn_tail_bytes, 0);
    assert_eq!(recovered_state(&rec), model);
    // The recovered segment is cut to its records; the next one starts fresh.
    assert_eq!(segment_file(&disk, &dir, 1).len(), valid);
    assert_eq!(segments(&disk, &dir), vec![1, 101]);
    log.close().unwrap();
    reboot_recovers_exactly(&disk, opts, &model);
    // The empty zero-filled segment of the last run was removed, not reported as torn.
    assert_eq!(segments(&disk, &dir), vec![1, 101]);
}

/// After a reboot of `disk` (unsynced data dropped), the log reopens with no torn bytes and
/// exactly `expected`.
fn reboot_recovers_exactly(disk: &SimStorage, opts: LogOptions, expected: &[Bytes]) {
    let (_log, rec) = Log::open(opts, Arc::new(disk.reboot())).unwrap();
    assert_eq!(rec.torn_tail_bytes, 0);
    assert_eq!(recovered_state(&rec), expected);
}

/// Length of a segment holding `records` right after its header.
fn records_end(records: &[Bytes]) -> u64 {
    SEGMENT_HEADER_LEN as u64 + records.iter().map(|p| 16 + p.len() as u64).sum::<u64>()
}

#[test]
fn with_a_window_background_and_lazy_records_are_appended_without_zero_fill() {
    let disk = SimStorage::new(21);
    let mut opts = LogOptions::new(PathBuf::from("/sim/zf/plain"));
    opts.background_fsync_ms = 5;
    // Zero fill only after a waited-for commit, and none comes.
    opts.zero_fill_window = Duration::from_secs(10);
    let dir = opts.dir.clone();
    let (log, _) = Log::open(opts.clone(), Arc::new(disk.clone())).unwrap();
    assert_eq!(segment_file(&disk, &dir, 1).len(), SEGMENT_HEADER_LEN);
    let model: Vec<Bytes> = (0..200).map(|i| payload("plain", i, 3000)).collect();
    for (i, p) in model.iter().enumerate() {
        let degree = if i % 2 == 0 {
            Durability::Background
        } else {
            Durability::Lazy
        };
        log.append(p.clone(), degree).unwrap();
    }
    // Covered by a background fsync within its bound; nobody waited for a commit.
    let last = model.len() as Lsn;
    for _ in 0..200 {
        if log.durable_lsn() >= last {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(log.durable_lsn(), last);
    assert_eq!(log.stats().zero_fill_bytes, 0);
    assert_eq!(
        segment_file(&disk, &dir, 1).len() as u64,
        records_end(&model),
        "the file holds the records and nothing after them"
    );
    log.close().unwrap();
    reboot_recovers_exactly(&disk, opts, &model);
}

#[test]
fn a_strict_commit_turns_the_zero_fill_on_and_the_window_turns_it_off() {
    let disk = SimStorage::new(22);
    let mut opts = LogOptions::new(PathBuf::from("/sim/zf/window"));
    opts.segment_bytes = 10 << 20;
    opts.zero_fill_window = Duration::from_millis(300);
    let dir = opts.dir.clone();
    let (log, _) = Log::open(opts.clone(), Arc::new(disk.clone())).unwrap();
    let file_len = || segment_file(&disk, &dir, 1).len() as u64;
    let mut model = Vec::new();
    let mut append = |n: usize, degree: Durability| {
        for _ in 0..n {
            let p = payload("window", model.len() as u64, 100 << 10);
            log.append(p.clone(), degree).unwrap();
            model.push(p);
        }
        model.clone()
    };
    // Background records alone: appended, no zeros.
    let so_far = append(10, Durability::Background);
    std::thread::sleep(Duration::from_millis(40));
    assert_eq!(file_len(), records_end(&so_far));
    assert_eq!(log.stats().zero_fill_bytes, 0);
    // A strict commit: from its write on, the fill runs a chunk ahead (~1.1 MiB of records:
    // filled to 8 MiB).
    let so_far = append(1, Durability::Strict);
    log.sync_now().unwrap();
    assert_eq!(file_len(), 2 * CHUNK);
    let filled = log.stats().zero_fill_bytes;
    assert_eq!(filled, 2 * CHUNK - records_end(&so_far));
    // The window runs out; background records go on past the fill (to ~8.2 MiB) and extend
    // the file without more zeros, though the segment limit (10 MiB) is further on.
    std::thread::sleep(Duration::from_millis(400));
    let so_far = append(71, Durability::Background);
    log.close().unwrap();
    assert!(records_end(&so_far) > 2 * CHUNK);
    assert_eq!(file_len(), records_end(&so_far));
    reboot_recovers_exactly(&disk, opts, &so_far);
}

#[test]
fn a_zero_window_never_zero_fills_even_for_strict_commits() {
    let disk = SimStorage::new(23);
    let mut opts = LogOptions::new(PathBuf::from("/sim/zf/never"));
    opts.zero_fill_window = Duration::ZERO;
    opts.segment_bytes = 64 << 10;
    let dir = opts.dir.clone();
    let (log, _) = Log::open(opts.clone(), Arc::new(disk.clone())).unwrap();
    let model: Vec<Bytes> = (0..40).map(|i| payload("never", i, 4000)).collect();
    for p in &model {
        log.append(p.clone(), Durability::Strict).unwrap();
        log.sync_now().unwrap();
    }
    assert_eq!(log.stats().zero_fill_bytes, 0);
    log.close().unwrap();
    for first in segments(&disk, &dir) {
        let data = Bytes::from(segment_file(&disk, &dir, first));
        let scan = format::scan_segment(&data).unwrap();
        assert_eq!(
            scan.valid_len,
            data.len() as u64,
            "segment {first} ends at its records"
        );
    }
    let (_log, rec) = Log::open(opts, Arc::new(disk.reboot())).unwrap();
    assert_eq!(recovered_state(&rec), model);
}

#[test]
fn the_zero_fill_grows_a_chunk_at_a_time_up_to_segment_bytes() {
    let disk = SimStorage::new(2);
    // 10 MiB segments: chunks end at 4, 8 and (capped) 10 MiB; each write keeps the fill at
    // least a chunk ahead of its end.
    let opts = sim_opts("/sim/zf/grow", 10 << 20);
    let dir = opts.dir.clone();
    let (log, _) = Log::open(opts.clone(), Arc::new(disk.clone())).unwrap();
    let big = |i| payload("grow", i, 100 << 10);
    let mut model = Vec::new();
    let mut append = |n: u64| {
        for _ in 0..n {
            let p = big(model.len() as u64);
            log.append(p.clone(), Durability::Strict).unwrap();
            model.push(p);
        }
        log.sync_now().unwrap();
        segment_file(&disk, &dir, 1).len() as u64
    };
    assert_eq!(append(10), 2 * CHUNK); // ~1 MiB of records, filled to 8 MiB
    assert_eq!(append(40), 10 << 20); // ~5 MiB of records, filled to the cap
    assert_eq!(append(40), 10 << 20);
    let stats = log.stats();
    assert_eq!(stats.segments, 1);
    assert_eq!(
        stats.zero_fill_bytes,
        (10 << 20) - SEGMENT_HEADER_LEN as u64
    );
    // The next record does not fit: a new segment, created with its first chunk of zeros and
    // kept a chunk ahead of its records once they are written.
    append(20);
    assert_eq!(segments(&disk, &dir).len(), 2);
    let second = *segments(&disk, &dir).last().unwrap();
    assert_eq!(segment_file(&disk, &dir, second).len() as u64, 2 * CHUNK);
    log.close().unwrap();
    reboot_recovers_exactly(&disk, opts, &model);
}

#[test]
fn a_record_larger_than_a_segment_extends_the_file_past_the_zero_fill() {
    let disk = SimStorage::new(3);
    let opts = sim_opts("/sim/zf/huge", 1000);
    let dir = opts.dir.clone();
    let (log, _) = Log::open(opts.clone(), Arc::new(disk.clone())).unwrap();
    assert_eq!(segment_file(&disk, &dir, 1).len(), 1000);
    let model = vec![
        payload("huge", 0, 10),
        payload("huge", 1, 5000),
        payload("huge", 2, 10),
    ];
    for p in &model {
        log.append(p.clone(), Durability::Strict).unwrap();
        log.sync_now().unwrap();
    }
    assert_eq!(segments(&disk, &dir), vec![1, 2, 3]);
    assert_eq!(segment_file(&disk, &dir, 2).len(), 24 + 16 + 5000);
    log.close().unwrap();
    reboot_recovers_exactly(&disk, opts, &model);
}

/// Appends at mixed degrees into a zero-filled segment, crashes with `mode`, and checks that
/// every durable record comes back and torn bytes are reported exactly when non-zero junk
/// follows the records.
fn crash_inside_the_zero_fill(seed: u64, mode: CrashMode, segment_bytes: u64) -> u64 {
    let mut rng = StdRng::seed_from_u64(seed);
    let disk = SimStorage::new(seed);
    let mut opts = sim_opts("/sim/zf/crash", segment_bytes);
    // Odd seeds run with a zero fill window: no fill until the first strict commit or sync,
    // then fill ahead; segments and reopened logs start without it again.
    if seed % 2 == 1 {
        opts.zero_fill_window = Duration::from_secs(10);
    }
    // Lazy records reach the OS at once and background ones wait a while for their fsync,
    // so a crash usually finds written but unsynced records to drop or tear.
    opts.lazy_flush_ms = 0;
    opts.background_fsync_ms = 50;
    let dir = opts.dir.clone();
    let (mut log, _) = Log::open(opts.clone(), Arc::new(disk.clone())).unwrap();
    let mut model: Vec<Bytes> = Vec::new();
    let mut torn_seen = 0;
    for round in 0..4 {
        let mut acked = 0;
        for i in 0..rng.gen_range(1..60) {
            let degree =
                [Durability::Lazy, Durability::Background, Durability::Strict][rng.gen_range(0..3)];
            let p = payload(&format!("z{seed}r{round}"), i, rng.gen_range(0..300));
            log.append(p.clone(), degree).unwrap();
            model.push(p);
            if rng.gen_bool(0.2) {
                acked = log.sync_now().unwrap();
            }
        }
        let p = payload(&format!("z{seed}r{round}"), 999, rng.gen_range(1..400));
        log.append(p.clone(), Durability::Lazy).unwrap();
        model.push(p);
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..3)));
        let durable = log.durable_lsn().max(acked);
        disk.crash(mode);
        drop(log);
        let junk = junk_in_last_segment(&disk.reboot(), &dir);
        let (reopened, rec) = Log::open(opts.clone(), Arc::new(disk.reboot()))
            .unwrap_or_else(|e| panic!("seed {seed} {mode:?}: reopen failed: {e}"));
        assert_eq!(
            rec.torn_tail_bytes, junk,
            "seed {seed} {mode:?}: torn bytes must be the non-zero junk only"
        );
        if mode == CrashMode::DropUnsynced {
            assert_eq!(
                rec.torn_tail_bytes, 0,
                "seed {seed}: synced data has no junk"
            );
        }
        torn_seen += rec.torn_tail_bytes;
        let kept = check_prefix(&rec, &model, durable);
        model.truncate(kept);
        log = reopened;
    }
    log.close().unwrap();
    reboot_recovers_exactly(&disk, opts, &model);
    torn_seen
}

#[test]
fn crashes_inside_the_zero_fill_keep_every_durable_record() {
    for mode in CrashMode::ALL {
        let mut torn = 0;
        for seed in 0..12 {
            torn += crash_inside_the_zero_fill(seed, mode, 64 << 10);
        }
        eprintln!("{mode:?}: {torn} torn bytes over 12 seeds");
        if mode != CrashMode::DropUnsynced {
            assert!(torn > 0, "{mode:?}: no crash tore a record");
        }
    }
}

#[test]
fn crashes_with_many_small_segments_keep_every_durable_record() {
    for (i, mode) in CrashMode::ALL.into_iter().enumerate() {
        for seed in 0..6 {
            crash_inside_the_zero_fill(100 + seed * 3 + i as u64, mode, 300);
        }
    }
}

#[test]
fn small_segments_rotate_many_times_and_keep_their_zero_tails() {
    let disk = SimStorage::new(5);
    let opts = sim_opts("/sim/zf/rotate", 200);
    let dir = opts.dir.clone();
    let (log, _) = Log::open(opts.clone(), Arc::new(disk.clone())).unwrap();
    let mut model = Vec::new();
    for i in 0..400u64 {
        let p = payload("rot", i, (i % 50) as usize);
        let degree = if i % 7 == 0 {
            Durability::Strict
        } else {
            Durability::Lazy
        };
        log.append(p.clone(), degree).unwrap();
        model.push(p);
    }
    log.sync_now().unwrap();
    let stats = log.stats();
    assert!(stats.segments >= 60, "only {} segments", stats.segments);
    log.close().unwrap();
    let firsts = segments(&disk, &dir);
    assert_eq!(firsts.len() as u64, stats.segments);
    let mut zero_tails = 0;
    for &first in &firsts {
        let data = Bytes::from(segment_file(&disk, &dir, first));
        assert_eq!(
            data.len(),
            200,
            "segment {first}: zero-filled to segment_bytes"
        );
        let scan = format::scan_segment(&data).unwrap();
        assert_eq!(scan.junk_len(), 0);
        if scan.valid_len < 200 {
            zero_tails += 1;
        }
    }
    assert!(zero_tails > firsts.len() / 2, "{zero_tails}");
    let (log, rec) = Log::open(opts.clone(), Arc::new(disk.reboot())).unwrap();
    assert_eq!(rec.torn_tail_bytes, 0);
    assert_eq!(recovered_state(&rec), model);
    // A snapshot removes covered segments; what is left still chains.
    log.write_snapshot(250, &mut model[..250].iter().cloned())
        .unwrap();
    log.close().unwrap();
    let (_log, rec) = Log::open(opts, Arc::new(disk.reboot())).unwrap();
    assert_eq!(rec.snapshot_lsn, 250);
    check_prefix(&rec, &model, 400);
}

#[test]
fn segments_are_zero_filled_on_disk() {
    let dir = TempDir::new("zerofill");
    let mut opts = LogOptions::new(dir.path().join("log"));
    opts.segment_bytes = 6 << 20;
    opts.zero_fill_window = Duration::MAX;
    let (log, _) = Log::open(opts.clone(), Arc::new(OsStorage::default())).unwrap();
    let path = opts.dir.join(format::segment_file_name(1));
    let size = || std::fs::metadata(&path).unwrap().len();
    assert_eq!(size(), CHUNK);
    let mut model = Vec::new();
    for i in 0..50u64 {
        let p = payload("os", i, 100 << 10);
        log.append(p.clone(), Durability::Lazy).unwrap();
        model.push(p);
    }
    log.sync_now().unwrap();
    // 50 * 100 KiB runs past the first chunk: zero-filled up to the segment limit.
    assert_eq!(size(), 6 << 20);
    log.close().unwrap();
    let data = std::fs::read(&path).unwrap();
    let valid = SEGMENT_HEADER_LEN + model.iter().map(|p| 16 + p.len()).sum::<usize>();
    assert!(data[valid..].iter().all(|&b| b == 0));

    let (log, rec) = Log::open(opts.clone(), Arc::new(OsStorage::default())).unwrap();
    assert_eq!(rec.torn_tail_bytes, 0);
    assert_eq!(recovered_state(&rec), model);
    assert_eq!(
        size() as usize,
        valid,
        "the recovered segment is cut to its records"
    );
    log.close().unwrap();
}

#[test]
fn os_files_append_at_the_logical_end_over_zero_fill() {
    use gradus_log::Storage;
    let dir = TempDir::new("osfile");
    let path = dir.path().join("f");
    let mut f = OsStorage::default().create(&path).unwrap();
    f.append(b"head|").unwrap();
    f.preallocate(3 << 20).unwrap(); // more than one zero buffer
    assert_eq!(f.len(), 5);
    f.append(b"body").unwrap();
    f.preallocate(100).unwrap(); // smaller: nothing happens
    f.sync_data().unwrap();
    let data = std::fs::read(&path).unwrap();
    assert_eq!(data.len(), 3 << 20);
    assert_eq!(&data[..9], b"head|body");
    assert!(data[9..].iter().all(|&b| b == 0));
    // Past the zero fill, appends extend the file; a later zero fill starts at its end.
    f.append(&vec![b'x'; 3 << 20]).unwrap();
    f.preallocate((6 << 20) + 100).unwrap();
    f.append(b"tail").unwrap();
    assert_eq!(f.len(), (3 << 20) + 13);
    let data = std::fs::read(&path).unwrap();
    assert_eq!(data.len(), (6 << 20) + 100);
    assert_eq!(&data[(3 << 20) + 9..(3 << 20) + 13], b"tail");
    assert!(data[(3 << 20) + 13..].iter().all(|&b| b == 0));
}

/// On real files the fill ahead runs on another thread: appends racing it — below the filled
/// end, and past it while the fill is still being written — must never lose a byte to zeros,
/// and a later fill ask made while one runs is carried out too. Through the page cache and
/// with direct I/O.
#[test]
fn os_files_fill_ahead_in_the_background_without_zeroing_appends() {
    fill_ahead_race(false);
    fill_ahead_race(true);
}

/// A segment file as the log makes one: `create_padded` (direct I/O where the file system
/// takes it) or plain `create`. Says so when direct I/O was asked for and refused, so a run
/// on such a file system cannot pass for a test of direct I/O unnoticed.
fn os_file(path: &Path, direct: bool) -> Box<dyn gradus_log::StorageFile> {
    use gradus_log::Storage;
    if !direct {
        return OsStorage::new(false).create(path).unwrap();
    }
    let f = OsStorage::new(true).create_padded(path).unwrap();
    if !f.is_direct() {
        eprintln!(
            "note: the file system refused O_DIRECT; the direct-I/O test ran on ordinary writes"
        );
    }
    f
}

fn fill_ahead_race(direct: bool) {
    let dir = TempDir::new("osfill");
    let path = dir.path().join("f");
    let mut f = os_file(&path, direct);
    let mut expected = Vec::new();
    let mut rng = StdRng::seed_from_u64(11);
    for round in 0..40u64 {
        // Most rounds start with no fill running (so the new one starts right at the appends'
        // end and the appends below race it); every third asks twice while one runs.
        if round % 3 != 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        f.preallocate_ahead(f.len() + (2 << 20)).unwrap();
        if round % 3 == 0 {
            f.preallocate_ahead(f.len() + (3 << 20)).unwrap();
        }
        // Appends of up to 200 KiB: some land in filled space, some run past the fill still
        // being written (they must wait for it rather than be overwritten by it).
        for _ in 0..rng.gen_range(1..6) {
            let chunk: Vec<u8> = (0..rng.gen_range(1..200 << 10))
                .map(|i| (i as u8) | 1)
                .collect();
            f.append(&chunk).unwrap();
            expected.extend_from_slice(&chunk);
        }
    }
    f.sync_data().unwrap();
    // Let the last fill finish, then check every appended byte and that the rest is zeros.
    let mut data = Vec::new();
    for _ in 0..100 {
        data = std::fs::read(&path).unwrap();
        if data.len() as u64 >= f.len() + (1 << 20) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(f.len(), expected.len() as u64);
    assert!(
        data.len() as u64 >= f.len() + (1 << 20),
        "fill ahead never finished"
    );
    assert!(
        data[..expected.len()] == expected[..],
        "an append was overwritten"
    );
    assert!(data[expected.len()..].iter().all(|&b| b == 0));
}

/// Direct I/O writes whole blocks: appends of every size (crossing block boundaries, the
/// staging buffer's size, and the zero fill) land byte for byte at the logical end, the
/// partial block each one leaves is written again by the next, and what follows the last one
/// on disk is zeros only, to a block boundary.
#[test]
fn os_files_written_directly_keep_every_byte() {
    let dir = TempDir::new("osdirect");
    let path = dir.path().join("f");
    let mut f = os_file(&path, true);
    let mut expected = Vec::new();
    let mut rng = StdRng::seed_from_u64(12);
    let sizes = [
        1usize,
        4095,
        4096,
        4097,
        17,
        (4 << 20) + 3,
        1,
        8191,
        100_000,
    ];
    for (i, &size) in sizes.iter().chain(&[0usize; 30]).enumerate() {
        let size = if size == 0 {
            rng.gen_range(1..20_000)
        } else {
            size
        };
        let chunk: Vec<u8> = (0..size).map(|j| (i + j) as u8 | 1).collect();
        if i % 7 == 3 {
            f.preallocate(f.len() + 10_000).unwrap();
        }
        // Some appends as several slices, as the log writes records.
        let (a, b) = chunk.split_at(size / 2);
        f.append_vectored(&[std::io::IoSlice::new(a), std::io::IoSlice::new(b)])
            .unwrap();
        expected.extend_from_slice(&chunk);
        assert_eq!(f.len(), expected.len() as u64);
        if i % 5 == 0 {
            f.sync_data().unwrap();
        }
    }
    f.sync_data().unwrap();
    let data = std::fs::read(&path).unwrap();
    assert!(
        data[..expected.len()] == expected[..],
        "an append was lost or moved"
    );
    assert!(data[expected.len()..].iter().all(|&b| b == 0));
    if f.is_direct() {
        assert_eq!(
            data.len() % gradus_log::DIRECT_BLOCK,
            0,
            "direct writes are whole blocks"
        );
        assert!(data.len() - expected.len() < 10_000 + gradus_log::DIRECT_BLOCK);
    }
}
