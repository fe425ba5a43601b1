//! libFuzzer target for write-ahead-log recovery (`gradus-log`): the input becomes a log
//! directory on a SimStorage and the log is opened. The first byte picks the layout:
//! 0 — the rest is a whole segment file `wal-…1.log`;
//! 1 — a valid segment header, then the rest as the record area;
//! 2 — valid records built from the rest (each chunk: a length byte, then that many payload
//!     bytes), whatever does not fill a chunk appended raw as a torn tail;
//! 3 — the rest is a snapshot file beside a valid two-record segment.
//! Checks: no panic; success only with gap-free records that are a prefix of what was built
//! (layout 2); refusal only as `Corrupt`/`UnsupportedVersion`; streaming recovery (a sink
//! applying batches, on an identical disk) reaches the same state or the same error; after a
//! successful open (which may truncate a torn tail) a second open succeeds with the same state
//! and nothing torn.
//! Run with `cargo +nightly fuzz run log_recovery`.
#![no_main]

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use gradus_log::format::{self, encode_record, encode_segment_header};
use gradus_log::{Log, LogError, LogOptions, Recovered, RecoveryBatch, SimStorage};
use libfuzzer_sys::fuzz_target;

/// Snapshot items then record payloads, checking the records are gap-free.
fn state(rec: &Recovered) -> Vec<Bytes> {
    let mut next = rec.snapshot_lsn + 1;
    for (lsn, _) in &rec.records {
        assert_eq!(*lsn, next, "records have a hole or are out of order");
        next += 1;
    }
    assert_eq!(rec.last_lsn, next - 1);
    let mut all = rec.snapshot_items.clone();
    all.extend(rec.records.iter().map(|(_, p)| p.clone()));
    all
}

fn open(disk: &SimStorage, dir: &Path) -> Result<(Log, Recovered), LogError> {
    // Small segments keep a case cheap: each open zero-fills the segment it starts up to
    // `segment_bytes` (or one 4 MiB chunk). Recovery reads the files whatever this is.
    let mut opts = LogOptions::new(dir);
    opts.segment_bytes = 64 << 10;
    Log::open(opts, Arc::new(disk.reboot()))
}

/// [`open`] through a sink: the state it ends up with (snapshot items, minus discarded ones,
/// then record payloads).
fn open_streaming(disk: &SimStorage, dir: &Path) -> Result<Vec<Bytes>, LogError> {
    let mut opts = LogOptions::new(dir);
    opts.segment_bytes = 64 << 10;
    let mut state: Vec<Bytes> = Vec::new();
    let mut sink = |batch: RecoveryBatch<'_>| {
        match batch {
            RecoveryBatch::SnapshotItems(items) => state.extend(items),
            RecoveryBatch::DiscardSnapshot => state.clear(),
            RecoveryBatch::Records(records) => {
                state.extend(records.drain(..).map(|(_, payload)| payload))
            }
        }
        Ok(())
    };
    Log::open_streaming(opts, Arc::new(disk.reboot()), &mut sink)?;
    Ok(state)
}

fuzz_target!(|data: &[u8]| {
    let Some((&layout, rest)) = data.split_first() else {
        return;
    };
    let dir = Path::new("/fuzz/log");
    let disk = SimStorage::new(u64::from(layout));
    let segment_path = dir.join(format::segment_file_name(1));
    let mut built: Option<Vec<Bytes>> = None;
    match layout % 4 {
        0 => disk.put_file(&segment_path, rest),
        1 => {
            let mut file = encode_segment_header(1).to_vec();
            file.extend_from_slice(rest);
            disk.put_file(&segment_path, &file);
        }
        2 => {
            let mut file = encode_segment_header(1).to_vec();
            let mut payloads = Vec::new();
            let mut input = rest;
            while let Some((&len, tail)) = input.split_first() {
                if tail.len() < len as usize {
                    break;
                }
                let (payload, tail) = tail.split_at(len as usize);
                encode_record(&mut file, payloads.len() as u64 + 1, payload);
                payloads.push(Bytes::copy_from_slice(payload));
                input = tail;
            }
            file.extend_from_slice(input);
            disk.put_file(&segment_path, &file);
            built = Some(payloads);
        }
        _ => {
            let mut file = encode_segment_header(1).to_vec();
            encode_record(&mut file, 1, b"one");
            encode_record(&mut file, 2, b"two");
            disk.put_file(&segment_path, &file);
            disk.put_file(&dir.join(format::snapshot_file_name(1)), rest);
        }
    }
    // An identical disk for the streaming open: the first open may cut a torn tail.
    let twin = SimStorage::new(u64::from(layout));
    for name in disk.file_names(dir) {
        if let Some(content) = disk.file_contents(&dir.join(&name)) {
            twin.put_file(&dir.join(name), &content);
        }
    }
    let streamed = open_streaming(&twin, dir);
    match open(&disk, dir) {
        Ok((log, rec)) => {
            let recovered = state(&rec);
            assert_eq!(
                streamed.ok(),
                Some(recovered.clone()),
                "streaming recovery differs"
            );
            if let Some(built) = &built {
                assert!(recovered.len() <= built.len());
                assert_eq!(
                    &recovered[..],
                    &built[..recovered.len()],
                    "invented records"
                );
            }
            log.close().expect("close after a clean open");
            let (_log, again) = open(&disk, dir).expect("second open after a repair");
            assert_eq!(again.torn_tail_bytes, 0);
            assert_eq!(state(&again), recovered);
        }
        Err(e @ LogError::Corrupt { .. }) | Err(e @ LogError::UnsupportedVersion { .. }) => {
            assert_eq!(
                streamed.err().map(|s| s.to_string()),
                Some(e.to_string()),
                "streaming recovery differs"
            );
        }
        Err(other) => panic!("unexpected error: {other}"),
    }
});
