//! The log on real files (OsStorage in a temp dir): append and reopen, segment rotation,
//! snapshots and the segment deletion they allow, torn and corrupt files, the degrees' timing,
//! async waiters, and argument errors.

mod common;

use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{check_prefix, payload, recovered_state, TempDir};
use gradus_log::format::{self, FileKind};
use gradus_log::{Durability, Log, LogError, LogOptions, OsStorage};

fn opts(dir: &TempDir) -> LogOptions {
    LogOptions::new(dir.path().join("log"))
}

fn files(opts: &LogOptions) -> Vec<FileKind> {
    let mut kinds: Vec<FileKind> = std::fs::read_dir(&opts.dir)
        .unwrap()
        .filter_map(|e| format::parse_file_name(e.unwrap().file_name().to_str()?))
        .collect();
    kinds.sort();
    kinds
}

fn segment_count(opts: &LogOptions) -> usize {
    files(opts)
        .iter()
        .filter(|k| matches!(k, FileKind::Segment(_)))
        .count()
}

#[test]
fn records_survive_close_and_reopen() {
    let dir = TempDir::new("reopen");
    let opts = opts(&dir);
    let (log, rec) = Log::open(opts.clone(), Arc::new(OsStorage::default())).unwrap();
    assert_eq!(rec.last_lsn, 0);
    let mut model = Vec::new();
    for i in 0..50u64 {
        let degree = [Durability::Lazy, Durability::Background, Durability::Strict][i as usize % 3];
        let p = payload("r", i, (i * 7 % 90) as usize);
        assert_eq!(log.append(p.clone(), degree).unwrap(), i + 1);
        model.push(p);
    }
    assert_eq!(log.sync_now().unwrap(), 50);
    assert_eq!(log.durable_lsn(), 50);
    log.close().unwrap();

    let (log, rec) = Log::open(opts.clone(), Arc::new(OsStorage::default())).unwrap();
    assert_eq!(rec.snapshot_lsn, 0);
    assert_eq!(rec.torn_tail_bytes, 0);
    check_prefix(&rec, &model, 50);
    assert_eq!(rec.last_lsn, 50);
    // New records continue after the recovered ones, in a fresh segment.
    assert_eq!(
        log.append(Bytes::from_static(b"next"), Durability::Strict)
            .unwrap(),
        51
    );
    assert!(log
        .wait_durable_blocking(51, Duration::from_secs(10))
        .unwrap());
    log.close().unwrap();
    assert!(files(&opts).contains(&FileKind::Segment(51)));

    let (_log, rec) = Log::open(opts, Arc::new(OsStorage::default())).unwrap();
    model.push(Bytes::from_static(b"next"));
    check_prefix(&rec, &model, 51);
}

#[test]
fn segments_rotate_at_the_size_limit_and_chain_on_recovery() {
    let dir = TempDir::new("rotate");
    let mut opts = opts(&dir);
    opts.segment_bytes = 512;
    let (log, _) = Log::open(opts.clone(), Arc::new(OsStorage::default())).unwrap();
    let mut model = Vec::new();
    for i in 0..120u64 {
        let p = payload("rot", i, 40);
        log.append(p.clone(), Durability::Lazy).unwrap();
        model.push(p);
        if i % 17 == 0 {
            log.sync_now().unwrap();
        }
    }
    log.sync_now().unwrap();
    let stats = log.stats();
    // 120 records * 56 bytes over 512-byte segments (24-byte header, 8 records each).
    assert!(stats.segments >= 14, "only {} segments", stats.segments);
    assert_eq!(stats.segments as usize, segment_count(&opts));
    log.close().unwrap();
    for kind in files(&opts) {
        if let FileKind::Segment(first) = kind {
            // Direct I/O pads the last block with zeros: the records end by 512 bytes.
            let data = std::fs::read(opts.dir.join(format::segment_file_name(first))).unwrap();
            let used = data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            assert!(used <= 512, "segment {first} has {used} bytes of records");
            assert!(data.len() <= gradus_log::DIRECT_BLOCK.max(512));
        }
    }
    let (_log, rec) = Log::open(opts, Arc::new(OsStorage::default())).unwrap();
    check_prefix(&rec, &model, 120);
    assert_eq!(rec.last_lsn, 120);
}

#[test]
fn a_snapshot_replaces_the_segments_it_covers() {
    let dir = TempDir::new("snapshot");
    let mut opts = opts(&dir);
    opts.segment_bytes = 400;
    let (log, _) = Log::open(opts.clone(), Arc::new(OsStorage::default())).unwrap();
    let mut model = Vec::new();
    for i in 0..100u64 {
        let p = payload("snap", i, 30);
        log.append(p.clone(), Durability::Background).unwrap();
        model.push(p);
    }
    log.sync_now().unwrap();
    let before = segment_count(&opts);

    let size = log
        .write_snapshot(60, &mut model[..60].iter().cloned())
        .unwrap();
    assert_eq!(
        size,
        std::fs::metadata(opts.dir.join(format::snapshot_file_name(60)))
            .unwrap()
            .len()
    );
    let after = files(&opts);
    let segments: Vec<u64> = after
        .iter()
        .filter_map(|k| match k {
            FileKind::Segment(first) => Some(*first),
            _ => None,
        })
        .collect();
    assert!(segments.len() < before, "no segment was removed");
    // The oldest remaining segment still holds LSN 61, the first one the snapshot lacks.
    assert!(segments[0] <= 61 && (segments.len() == 1 || segments[1] > 61));
    assert_eq!(log.stats().segments as usize, segments.len());
    assert_eq!(log.stats().snapshot_lsn, 60);

    // A newer snapshot removes the older one.
    for i in 100..110u64 {
        let p = payload("snap", i, 30);
        log.append(p.clone(), Durability::Strict).unwrap();
        model.push(p);
    }
    log.sync_now().unwrap();
    log.write_snapshot(105, &mut model[..105].iter().cloned())
        .unwrap();
    let snaps: Vec<FileKind> = files(&opts)
        .into_iter()
        .filter(|k| matches!(k, FileKind::Snapshot(_)))
        .collect();
    assert_eq!(snaps, vec![FileKind::Snapshot(105)]);
    log.close().unwrap();

    let (_log, rec) = Log::open(opts, Arc::new(OsStorage::default())).unwrap();
    assert_eq!(rec.snapshot_lsn, 105);
    assert_eq!(rec.snapshot_items.len(), 105);
    assert_eq!(rec.records.first().map(|r| r.0), Some(106));
    check_prefix(&rec, &model, 110);
}

#[test]
fn a_snapshot_beyond_the_last_lsn_is_refused() {
    let dir = TempDir::new("snaprange");
    let (log, _) = Log::open(opts(&dir), Arc::new(OsStorage::default())).unwrap();
    log.append(Bytes::from_static(b"a"), Durability::Lazy)
        .unwrap();
    assert!(matches!(
        log.write_snapshot(2, &mut std::iter::empty()),
        Err(LogError::LsnOutOfRange { lsn: 2, last: 1 })
    ));
}

/// A snapshot whose item source fails part-way is abandoned before anything is renamed or removed:
/// a source that merely stopped early would have passed for a complete snapshot.
#[test]
fn a_snapshot_whose_source_fails_leaves_the_older_files_alone() {
    let dir = TempDir::new("snapsource");
    let opts = opts(&dir);
    let (log, _) = Log::open(opts.clone(), Arc::new(OsStorage::default())).unwrap();
    let model: Vec<Bytes> = (0..40u64).map(|i| payload("src", i, 30)).collect();
    for p in &model {
        log.append(p.clone(), Durability::Strict).unwrap();
    }
    log.sync_now().unwrap();
    log.write_snapshot(10, &mut model[..10].iter().cloned())
        .unwrap();
    let before = files(&opts);
    let mut items = model[..20]
        .iter()
        .cloned()
        .map(Ok)
        .chain([Err("the producer stopped".to_string())]);
    assert!(matches!(
        log.write_snapshot_from(30, &mut items),
        Err(LogError::SnapshotSource(why)) if why == "the producer stopped"
    ));
    assert_eq!(
        files(&opts),
        before,
        "no file renamed, removed or left behind"
    );
    assert_eq!(log.stats().snapshot_lsn, 10);
    log.close().unwrap();
    let (_log, rec) = Log::open(opts, Arc::new(OsStorage::default())).unwrap();
    assert_eq!(rec.snapshot_lsn, 10);
    check_prefix(&rec, &model, 40);
}

/// A zero fill still running when the log closes must stop with it: a later open cuts the
/// last segment to its records, and a fill thread going on after that would grow it again.
#[test]
fn closing_the_log_stops_its_zero_fill() {
    for round in 0..5u64 {
        let dir = TempDir::new("fillstop");
        let opts = opts(&dir);
        let (log, _) = Log::open(opts.clone(), Arc::new(OsStorage::default())).unwrap();
        // A strict write turns the zero fill on: a fill thread starts on the next 4 MiB.
        log.append(payload("f", round, 100), Durability::Strict)
            .unwrap();
        log.sync_now().unwrap();
        log.close().unwrap();
        let path = opts.dir.join(format::segment_file_name(1));
        let size = || std::fs::metadata(&path).unwrap().len();
        let at_close = size();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(size(), at_close, "round {round}: the file grew after close");
        let (_log, rec) = Log::open(opts, Arc::new(OsStorage::default())).unwrap();
        assert_eq!(rec.torn_tail_bytes, 0);
        assert_eq!(recovered_state(&rec).len(), 1);
    }
}

#[test]
fn a_torn_tail_is_truncated_and_reported() {
    let dir = TempDir::new("torn");
    let opts = opts(&dir);
    let (log, _) = Log::open(opts.clone(), Arc::new(OsStorage::default())).unwrap();
    let mut model = Vec::new();
    for i in 0..10u64 {
        let p = payload("t", i, 20);
        log.append(p.clone(), Durability::Strict).unwrap();
        model.push(p);
    }
    log.close().unwrap();
    let last = opts.dir.join(format::segment_file_name(1));
    // The segment is zero-filled past its records; they end at `clean_len`.
    let data = Bytes::from(std::fs::read(&last).unwrap());
    let scan = format::scan_segment(&data).unwrap();
    assert_eq!(scan.records.len(), 10);
    assert_eq!(scan.junk_len(), 0);
    let clean_len = scan.valid_len;
    assert!(
        (data.len() as u64) > clean_len,
        "the segment was not zero-filled"
    );
    // Half a record header right after the records, over the zero fill: what a crash in the
    // middle of a write leaves.
    let f = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
    f.write_all_at(&[7u8; 9], clean_len).unwrap();
    drop(f);

    let (log, rec) = Log::open(opts.clone(), Arc::new(OsStorage::default())).unwrap();
    assert_eq!(rec.torn_tail_bytes, 9);
    check_prefix(&rec, &model, 10);
    assert_eq!(std::fs::metadata(&last).unwrap().len(), clean_len);
    log.close().unwrap();
    let (_log, rec) = Log::open(opts, Arc::new(OsStorage::default())).unwrap();
    assert_eq!(rec.torn_tail_bytes, 0);
    check_prefix(&rec, &model, 10);
}

#[test]
fn corruption_in_an_earlier_segment_is_an_error() {
    let dir = TempDir::new("corrupt");
    let opts = opts(&dir);
    let (log, _) = Log::open(opts.clone(), Arc::new(OsStorage::default())).unwrap();
    for i in 0..5u64 {
        log.append(payload("c", i, 20), Durability::Strict).unwrap();
    }
    log.close().unwrap();
    let (log, _) = Log::open(opts.clone(), Arc::new(OsStorage::default())).unwrap();
    log.append(payload("c", 5, 20), Durability::Strict).unwrap();
    log.close().unwrap();
    // wal-1 is no longer the last segment: flip a byte in its third record.
    let first = opts.dir.join(format::segment_file_name(1));
    let mut data = std::fs::read(&first).unwrap();
    let offset = format::SEGMENT_HEADER_LEN + 2 * (16 + 20);
    data[offset + 20] ^= 0x10;
    std::fs::write(&first, &data).unwrap();
    match Log::open(opts, Arc::new(OsStorage::default())) {
        Err(LogError::Corrupt {
            file, offset: at, ..
        }) => {
            assert_eq!(file, first);
            assert_eq!(at, offset as u64);
        }
        other => panic!("expected Corrupt, got {:?}", other.map(|(_, r)| r)),
    }
}

#[test]
fn lazy_records_reach_the_os_without_an_fsync_of_their_own() {
    let dir = TempDir::new("lazy");
    let mut opts = opts(&dir);
    opts.lazy_flush_ms = 20;
    let (log, _) = Log::open(opts, Arc::new(OsStorage::default())).unwrap();
    let fsyncs_before = log.stats().fsyncs;
    let lsn = log
        .append(Bytes::from_static(b"lazy"), Durability::Lazy)
        .unwrap();
    let started = Instant::now();
    while log.written_lsn() < lsn {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "lazy record never written"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(log.durable_lsn(), 0);
    assert_eq!(log.stats().fsyncs, fsyncs_before);
    // A later strict record's fsync covers it (one ordered log).
    let strict = log
        .append(Bytes::from_static(b"strict"), Durability::Strict)
        .unwrap();
    assert!(log
        .wait_durable_blocking(strict, Duration::from_secs(10))
        .unwrap());
    assert!(log.durable_lsn() >= lsn);
}

#[test]
fn a_full_buffer_is_written_before_the_lazy_deadline() {
    let dir = TempDir::new("buffer");
    let mut opts = opts(&dir);
    opts.lazy_flush_ms = 60_000;
    opts.buffer_bytes = 1024;
    let (log, _) = Log::open(opts, Arc::new(OsStorage::default())).unwrap();
    let mut last = 0;
    for i in 0..40 {
        last = log.append(payload("b", i, 100), Durability::Lazy).unwrap();
    }
    let started = Instant::now();
    while log.written_lsn() < 30 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "buffer never flushed"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(log.written_lsn() <= last);
}

#[test]
fn background_records_are_fsynced_without_anyone_asking() {
    let dir = TempDir::new("background");
    let mut opts = opts(&dir);
    opts.background_fsync_ms = 5;
    let (log, _) = Log::open(opts, Arc::new(OsStorage::default())).unwrap();
    let lsn = log
        .append(Bytes::from_static(b"bg"), Durability::Background)
        .unwrap();
    // Generous bound: this only shows that the fsync happens on its own.
    assert!(log
        .wait_durable_blocking(lsn, Duration::from_secs(10))
        .unwrap());
}

#[test]
fn many_async_waiters_are_released_by_group_commits() {
    let dir = TempDir::new("async");
    let (log, _) = Log::open(opts(&dir), Arc::new(OsStorage::default())).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..200u64 {
            let log = log.clone();
            tasks.push(tokio::spawn(async move {
                let lsn = log.append(payload("w", i, 32), Durability::Strict)?;
                log.wait_durable(lsn).await?;
                assert!(log.durable_lsn() >= lsn);
                Ok::<_, LogError>(lsn)
            }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
    });
    let stats = log.stats();
    assert_eq!(stats.durable_lsn, 200);
    assert!(stats.records_synced >= 200);
    log.close().unwrap();
}

#[test]
fn argument_errors() {
    let dir = TempDir::new("args");
    let (log, _) = Log::open(opts(&dir), Arc::new(OsStorage::default())).unwrap();
    assert!(matches!(
        log.append(Bytes::from_static(b"x"), Durability::None),
        Err(LogError::NotLogged)
    ));
    let huge = Bytes::from(vec![0u8; format::MAX_RECORD_LEN + 1]);
    assert!(matches!(
        log.append(huge, Durability::Lazy),
        Err(LogError::TooLarge { .. })
    ));
    assert!(matches!(
        log.wait_durable_blocking(1, Duration::from_millis(1)),
        Err(LogError::LsnOutOfRange { lsn: 1, last: 0 })
    ));
    assert!(log.wait_durable_blocking(0, Duration::ZERO).unwrap());
    assert_eq!(log.sync_now().unwrap(), 0);

    let lsn = log
        .append(Bytes::from_static(b"x"), Durability::Lazy)
        .unwrap();
    let clone = log.clone();
    log.close().unwrap();
    // Closing flushed and fsynced; every clone is closed.
    assert!(clone.durable_lsn() >= lsn);
    assert!(clone.wait_durable_blocking(lsn, Duration::ZERO).unwrap());
    assert!(matches!(
        clone.append(Bytes::from_static(b"y"), Durability::Strict),
        Err(LogError::Closed)
    ));
    assert!(matches!(clone.sync_now(), Err(LogError::Closed)));
}

#[test]
fn dropping_the_last_handle_flushes() {
    let dir = TempDir::new("drop");
    let opts = opts(&dir);
    let (log, _) = Log::open(opts.clone(), Arc::new(OsStorage::default())).unwrap();
    let model: Vec<Bytes> = (0..20).map(|i| payload("d", i, 10)).collect();
    for p in &model {
        log.append(p.clone(), Durability::Lazy).unwrap();
    }
    drop(log);
    let (_log, rec) = Log::open(opts, Arc::new(OsStorage::default())).unwrap();
    assert_eq!(recovered_state(&rec), model);
}

/// One batch of thousands of records, small ones (copied next to their headers) mixed with
/// large ones (written in place from their own buffers): more slices than one `pwritev` takes,
/// across zero-fill chunk and segment boundaries, then strict records one fsync each. Everything reads
/// back byte for byte.
#[test]
fn mixed_payload_sizes_in_one_vectored_batch_read_back_exactly() {
    let dir = TempDir::new("vectored");
    let mut opts = opts(&dir);
    opts.buffer_bytes = 64 << 20;
    opts.lazy_flush_ms = 60_000;
    // Small segments: the batch is cut at record boundaries into several segments.
    opts.segment_bytes = 4 << 20;
    let (log, _) = Log::open(opts.clone(), Arc::new(OsStorage::default())).unwrap();
    let sizes = [0usize, 1, 100, 511, 512, 513, 1024, 4096, 70_000];
    let mut model = Vec::new();
    for i in 0..3000u64 {
        let p = payload("v", i, sizes[i as usize % sizes.len()]);
        log.append(p.clone(), Durability::Lazy).unwrap();
        model.push(p);
    }
    // One sync: the writer takes all 3000 queued records as one batch.
    assert_eq!(log.sync_now().unwrap(), 3000);
    // Then strict records one fsync at a time.
    for i in 3000..3200u64 {
        let p = payload("s", i, 16 * 1024);
        let lsn = log.append(p.clone(), Durability::Strict).unwrap();
        assert!(log
            .wait_durable_blocking(lsn, Duration::from_secs(10))
            .unwrap());
        model.push(p);
    }
    log.close().unwrap();
    assert!(segment_count(&opts) >= 6, "{:?}", files(&opts));
    let (_log, rec) = Log::open(opts, Arc::new(OsStorage::default())).unwrap();
    assert_eq!(rec.torn_tail_bytes, 0);
    assert_eq!(check_prefix(&rec, &model, 3200), 3200);
}
