//! Recovery: turn the files in the log directory back into "snapshot + records after it".
//!
//! Rules, in order:
//! 1. `*.snap.tmp` files are abandoned snapshot writes: removed.
//! 2. The newest snapshot that decodes and checks out wins; a damaged one is skipped (with a
//!    warning) in favour of the previous one. An intact snapshot of an unknown version stops
//!    recovery ([`LogError::UnsupportedVersion`]). With a [`RecoverySink`] the items go out in
//!    batches while the file is read (and checked) on, so a snapshot found damaged after some
//!    batches is followed by [`RecoveryBatch::DiscardSnapshot`].
//! 3. Segments whose records are all `<= snapshot_lsn` are not read at all. The rest must
//!    chain: the first one starts at or before `snapshot_lsn + 1`, and each next one starts
//!    right after the last record of the previous one. A missing range is
//!    [`LogError::Corrupt`] — never silently skipped.
//! 4. Zero bytes from the end of a segment's last valid record to the end of its file are
//!    unused zero fill (the writer zero-fills segments ahead of their records), in any
//!    segment: neither a torn tail nor corruption, and never counted as torn bytes. Records
//!    lost to zeros in a segment but the last still show up, as a missing range (rule 3).
//!    What follows is about *junk*: the bytes from the first invalid byte after the records
//!    through the last non-zero byte of the file ([`format::SegmentScan::junk_len`]).
//! 5. Junk in any segment but the last is [`LogError::Corrupt`] with file and offset, even
//!    when zeros come before it.
//! 6. Junk in the last segment is a torn tail (the writer fsyncs a segment before it starts
//!    the next, so only the last one can hold unsynced bytes); its length is reported in
//!    [`Recovered::torn_tail_bytes`]. Because a bad record ends the scan, a bit flip in the
//!    middle of the last segment also drops what follows it; telling the two apart is not
//!    possible in general (a crash may persist later pages of an unsynced write before
//!    earlier ones), so the log does what fjall and etcd do.
//!    A last segment whose header is bad and that holds no valid record after it is a
//!    segment whose creation was torn (records are only written after the header is
//!    durable): it is removed (its non-zero bytes count as torn). With a valid record after a
//!    bad header, it is corruption.
//! 7. The last segment is truncated to its last valid record, durably, whatever follows it
//!    (zero fill, a torn tail or both). A last segment left without records is removed
//!    instead, so [`crate::Log::open`] can start a fresh segment named after the next LSN.
//!    New records never go into a recovered file.
//!
//! In repair mode (see [`crate::LogOptions::repair`]) the cases of rules 3 and 5 keep the valid
//! prefix instead of failing; the bytes it reports as set aside are counted through the last
//! non-zero byte of each file, like torn bytes.
//!
//! What is found goes into [`Recovered`], or, through [`crate::Log::open_streaming`], to a
//! [`RecoverySink`] as it is found: the snapshot's items first, then each segment's records once
//! that segment is checked, so the caller can apply them while later segments are read (the
//! needed segments are asked for ahead with [`Storage::prefetch`]).
//!
//! Depends on [`crate::format`] and [`crate::storage`] only.

use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::error::LogError;
use crate::format::{
    self, decode_record, scan_segment, FileKind, HeaderError, SnapshotError, SnapshotScan,
    FORMAT_VERSION, SEGMENT_HEADER_LEN,
};
use crate::storage::Storage;
use crate::Lsn;

/// What [`crate::Log::open`] found on disk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovered {
    /// LSN of the snapshot the state starts from (0 if none).
    pub snapshot_lsn: Lsn,
    /// The snapshot's items, in the order they were written (empty when they went to a
    /// [`RecoverySink`] instead).
    pub snapshot_items: Vec<Bytes>,
    /// How many items the snapshot had (in `snapshot_items` or handed to a sink).
    pub snapshot_items_recovered: usize,
    /// Every record after the snapshot, in LSN order, gap-free from `snapshot_lsn + 1` (empty
    /// when they went to a [`RecoverySink`] instead).
    pub records: Vec<(Lsn, Bytes)>,
    /// How many records recovery found after the snapshot (in `records` or handed to a sink).
    pub records_recovered: usize,
    /// Bytes dropped from the end of the last segment (a torn or corrupt tail): from the first
    /// invalid byte through the last non-zero one, so unused zero fill never counts.
    pub torn_tail_bytes: u64,
    /// The last LSN recovered (`max(snapshot_lsn, last record)`); new records continue after it.
    pub last_lsn: Lsn,
    /// In repair mode, what was dropped to keep the valid prefix (None when nothing was).
    pub repaired: Option<String>,
}

/// Where recovered items and records go as recovery finds them: into [`Recovered`] (the
/// default), or to a caller's function, which can start applying them while later segments are
/// still being read ([`crate::Log::open_streaming`]).
pub enum RecoveryBatch<'a> {
    /// Items of the snapshot, in the order written, in one or more batches before any record
    /// (none when there is no snapshot). They are handed over while the rest of the snapshot is
    /// still being read, so they are not known to be intact until the first `Records` batch or
    /// the end of recovery: a `DiscardSnapshot` may follow.
    SnapshotItems(Vec<Bytes>),
    /// The snapshot whose items were handed over turned out damaged further on: discard every
    /// item of it. Recovery goes on with an older snapshot (its items follow) or none.
    DiscardSnapshot,
    /// The records of one checked segment (or of the valid part of a damaged one that
    /// `--repair` keeps), in LSN order, after the snapshot's LSN; never empty. Later batches
    /// follow in LSN order, gap-free. A later segment may still turn out damaged, in which case
    /// recovery fails after some batches were handed over.
    Records(&'a mut Vec<(Lsn, Bytes)>),
}

/// A function [`RecoveryBatch`]es are handed to; an error stops recovery with
/// [`LogError::Apply`].
pub type RecoverySink<'s> = dyn FnMut(RecoveryBatch<'_>) -> Result<(), String> + 's;

/// Hands the records of one segment after the snapshot to `sink`, or keeps them in `recovered`.
fn emit(
    sink: &mut Option<&mut RecoverySink<'_>>,
    recovered: &mut Recovered,
    mut records: Vec<(Lsn, Bytes)>,
) -> Result<(), LogError> {
    let snapshot_lsn = recovered.snapshot_lsn;
    records.retain(|(lsn, _)| *lsn > snapshot_lsn);
    if records.is_empty() {
        return Ok(());
    }
    recovered.records_recovered += records.len();
    match sink {
        Some(sink) => sink(RecoveryBatch::Records(&mut records)).map_err(LogError::Apply),
        None => {
            recovered.records.append(&mut records);
            Ok(())
        }
    }
}

/// Snapshot items go to a sink in batches of about this many bytes (tiny in unit tests, so a
/// small snapshot makes several).
const SNAPSHOT_BATCH_BYTES: usize = if cfg!(test) { 64 } else { 64 << 20 };

/// Reads the snapshot at `path` (named for `lsn`): its items go into `recovered`, or to `sink`
/// in batches as they are read (the file is read ahead meanwhile, so loading one batch overlaps
/// with reading the next). Returns the number of items, or `None` if the snapshot is damaged or
/// misnamed (after telling the sink to discard what it got), so the caller tries an older one.
fn read_snapshot(
    storage: &dyn Storage,
    path: &Path,
    lsn: Lsn,
    sink: &mut Option<&mut RecoverySink<'_>>,
    recovered: &mut Recovered,
) -> Result<Option<usize>, LogError> {
    let skip = |why: &str| {
        tracing::warn!(file = %path.display(), reason = %why, "damaged snapshot; falling back to an older one");
        Ok(None)
    };
    if sink.is_some() {
        storage.prefetch(vec![path.to_path_buf()]);
    }
    let data = storage
        .map_all(path)
        .map_err(LogError::io_at("read", path))?;
    let mut scan = match SnapshotScan::start(&data) {
        Ok(scan) => scan,
        Err(SnapshotError::Invalid(why)) => return skip(&why),
        Err(SnapshotError::UnsupportedVersion(version)) => {
            return Err(LogError::UnsupportedVersion {
                file: path.to_path_buf(),
                version,
                supported: crate::format::SNAPSHOT_FORMAT_VERSION,
            })
        }
    };
    if scan.lsn() != lsn {
        return skip(&format!(
            "header says lsn {}, the file name {lsn}",
            scan.lsn()
        ));
    }
    let batch_bytes = if sink.is_some() {
        SNAPSHOT_BATCH_BYTES
    } else {
        usize::MAX
    };
    let mut items = 0;
    let mut collected = Vec::new();
    // A sink that fails on an item may be seeing damage the checksum will show: read on, and
    // report its error only if the snapshot turns out intact.
    let mut apply_error = None;
    loop {
        match scan.next_batch(batch_bytes) {
            Ok(Some(mut batch)) => {
                items += batch.len();
                match sink {
                    Some(sink) if apply_error.is_none() => {
                        apply_error = sink(RecoveryBatch::SnapshotItems(batch)).err();
                    }
                    Some(_) => {}
                    None => collected.append(&mut batch),
                }
            }
            Ok(None) => break,
            Err(e) => {
                if let Some(sink) = sink.as_deref_mut().filter(|_| items > 0) {
                    sink(RecoveryBatch::DiscardSnapshot).map_err(LogError::Apply)?;
                }
                return skip(&match e {
                    SnapshotError::Invalid(why) => why,
                    // Only `SnapshotScan::start` reports a version.
                    SnapshotError::UnsupportedVersion(v) => format!("format version {v}"),
                });
            }
        }
    }
    if let Some(e) = apply_error {
        return Err(LogError::Apply(e));
    }
    recovered.snapshot_items = collected;
    Ok(Some(items))
}

/// What recovery leaves behind for the writer.
#[derive(Debug)]
pub(crate) struct RecoveryOutcome {
    pub recovered: Recovered,
    /// Segment files still in the directory.
    pub segments: u64,
}

/// Runs recovery in `dir` (see the module docs). Mutates the directory only to remove
/// temporary/empty files and to truncate a torn tail, then fsyncs the directory.
pub(crate) fn recover(
    storage: &dyn Storage,
    dir: &Path,
    repair: bool,
    mut sink: Option<&mut RecoverySink<'_>>,
) -> Result<RecoveryOutcome, LogError> {
    let names = storage.list(dir).map_err(LogError::io_at("list", dir))?;
    let mut segments: Vec<Lsn> = Vec::new();
    let mut snapshots: Vec<Lsn> = Vec::new();
    let mut dir_dirty = false;
    for name in &names {
        match format::parse_file_name(name) {
            Some(FileKind::Segment(lsn)) => segments.push(lsn),
            Some(FileKind::Snapshot(lsn)) => snapshots.push(lsn),
            Some(FileKind::SnapshotTemp(_)) => {
                let path = dir.join(name);
                storage
                    .remove(&path)
                    .map_err(LogError::io_at("remove", &path))?;
                dir_dirty = true;
            }
            None => {}
        }
    }
    segments.sort_unstable();
    snapshots.sort_unstable_by(|a, b| b.cmp(a));

    let mut recovered = Recovered::default();
    for lsn in snapshots {
        let path = dir.join(format::snapshot_file_name(lsn));
        if let Some(items) = read_snapshot(storage, &path, lsn, &mut sink, &mut recovered)? {
            recovered.snapshot_lsn = lsn;
            recovered.snapshot_items_recovered = items;
            break;
        }
    }
    let snapshot_lsn = recovered.snapshot_lsn;

    // The first segment to read: the newest one starting at or before snapshot_lsn + 1
    // (everything before it is covered by the snapshot). Without one, read from the oldest
    // and let the chain check report the missing range.
    let first_needed = segments
        .iter()
        .rposition(|&first| first <= snapshot_lsn.saturating_add(1))
        .unwrap_or(0);
    let mut remaining_segments = segments.len() as u64;
    let mut last_lsn = snapshot_lsn;
    let mut expected_first: Option<Lsn> = None;
    let last_index = segments.len().saturating_sub(1);
    // In repair mode, `cut` ends the scan at segment `index`: keep `valid_len` bytes of it and set
    // every later segment aside. Returns the description of what was dropped.
    let cut = |index: usize, valid_len: u64, why: &LogError| -> Result<String, LogError> {
        let path = dir.join(format::segment_file_name(segments[index]));
        // Dropped bytes are counted through the last non-zero byte: unused zero fill is not
        // log data.
        let mut dropped_bytes = 0u64;
        let mut set_aside = Vec::new();
        let data = storage.read_all(&path).unwrap_or_default();
        let len = data.len() as u64;
        if valid_len >= SEGMENT_HEADER_LEN as u64 && valid_len < len {
            storage
                .truncate(&path, valid_len)
                .map_err(LogError::io_at("truncate", &path))?;
            dropped_bytes +=
                (format::nonzero_end(&data, valid_len as usize) as u64).saturating_sub(valid_len);
        } else if valid_len < SEGMENT_HEADER_LEN as u64 {
            set_aside.push(index);
        }
        set_aside.extend(index + 1..segments.len());
        for i in set_aside {
            let from = dir.join(format::segment_file_name(segments[i]));
            let to = dir.join(format!(
                "{}.corrupt",
                format::segment_file_name(segments[i])
            ));
            dropped_bytes += storage
                .read_all(&from)
                .map(|d| format::nonzero_end(&d, 0) as u64)
                .unwrap_or(0);
            storage
                .rename(&from, &to)
                .map_err(LogError::io_at("rename", &from))?;
        }
        storage
            .sync_dir(dir)
            .map_err(LogError::io_at("sync_dir", dir))?;
        Ok(format!(
            "{why}; kept the log up to there and set aside {dropped_bytes} bytes (files renamed *.corrupt)"
        ))
    };
    storage.prefetch(
        segments[first_needed..]
            .iter()
            .map(|&lsn| dir.join(format::segment_file_name(lsn)))
            .collect(),
    );
    for (index, &name_lsn) in segments.iter().enumerate().skip(first_needed) {
        if recovered.repaired.is_some() {
            break;
        }
        let is_last = index == last_index;
        let path = dir.join(format::segment_file_name(name_lsn));
        let data = storage
            .map_all(&path)
            .map_err(LogError::io_at("read", &path))?;
        let scan = match scan_segment(&data) {
            Ok(scan) => scan,
            Err(HeaderError::UnsupportedVersion(version)) => {
                return Err(LogError::UnsupportedVersion {
                    file: path,
                    version,
                    supported: FORMAT_VERSION,
                })
            }
            Err(header_error) => {
                let record_follows =
                    matches!(decode_record(&data, SEGMENT_HEADER_LEN), Ok(Some(_)));
                if !is_last || record_follows {
                    let err = corrupt(&path, 0, format!("{header_error}"));
                    if !repair {
                        return Err(err);
                    }
                    recovered.repaired = Some(cut(index, 0, &err)?);
                    remaining_segments = index as u64;
                    break;
                }
                // Zero fill written with the header is not torn data: count through the last
                // non-zero byte.
                let torn = format::nonzero_end(&data, 0) as u64;
                tracing::warn!(
                    file = %path.display(),
                    bytes = torn,
                    reason = %header_error,
                    "removing a last segment whose creation was torn"
                );
                storage
                    .remove(&path)
                    .map_err(LogError::io_at("remove", &path))?;
                dir_dirty = true;
                remaining_segments -= 1;
                recovered.torn_tail_bytes += torn;
                continue;
            }
        };
        let chain_error = if scan.first_lsn != name_lsn {
            Some(corrupt(
                &path,
                0,
                format!(
                    "header says first lsn {}, file name says {name_lsn}",
                    scan.first_lsn
                ),
            ))
        } else {
            match expected_first {
                None if name_lsn > snapshot_lsn.saturating_add(1) => Some(corrupt(
                    &path,
                    0,
                    format!(
                        "records {}..={} are missing (snapshot lsn {snapshot_lsn})",
                        snapshot_lsn + 1,
                        name_lsn - 1
                    ),
                )),
                Some(expected) if name_lsn != expected => Some(corrupt(
                    &path,
                    0,
                    format!(
                        "segment starts at lsn {name_lsn}, the previous one ends at {}",
                        expected - 1
                    ),
                )),
                _ => None,
            }
        };
        if let Some(err) = chain_error {
            if !repair {
                return Err(err);
            }
            recovered.repaired = Some(cut(index, 0, &err)?);
            remaining_segments = index as u64;
            break;
        }
        // Only bytes through the last non-zero one after the records can be damage; zeros after
        // them are unused zero fill, in any segment.
        let junk = scan.junk_len();
        if let (Some(damage), true) = (&scan.damage, junk > 0) {
            if !is_last {
                let err = corrupt(&path, damage.offset, damage.error.to_string());
                if !repair {
                    return Err(err);
                }
                recovered.repaired = Some(cut(index, scan.valid_len, &err)?);
                remaining_segments = index as u64 + 1;
                let segment_last = scan.last_lsn();
                last_lsn = last_lsn.max(segment_last);
                emit(&mut sink, &mut recovered, scan.records)?;
                break;
            }
            tracing::warn!(
                file = %path.display(),
                offset = damage.offset,
                bytes = junk,
                reason = %damage.error,
                "truncating the torn tail of the last segment"
            );
            recovered.torn_tail_bytes += junk;
        }
        // The last segment is cut to its valid records, durably, whether zero fill, a torn
        // tail or both follow them (new records go into a fresh segment, never into this one).
        // One left without records is removed below instead.
        if is_last && !scan.records.is_empty() && (data.len() as u64) > scan.valid_len {
            storage
                .truncate(&path, scan.valid_len)
                .map_err(LogError::io_at("truncate", &path))?;
        }
        let segment_last = scan.last_lsn();
        expected_first = Some(segment_last.saturating_add(1));
        last_lsn = last_lsn.max(segment_last);
        if is_last && scan.records.is_empty() {
            storage
                .remove(&path)
                .map_err(LogError::io_at("remove", &path))?;
            dir_dirty = true;
            remaining_segments -= 1;
        }
        emit(&mut sink, &mut recovered, scan.records)?;
    }
    recovered.last_lsn = last_lsn;
    if dir_dirty {
        storage
            .sync_dir(dir)
            .map_err(LogError::io_at("sync_dir", dir))?;
    }
    Ok(RecoveryOutcome {
        recovered,
        segments: remaining_segments,
    })
}

fn corrupt(path: &Path, offset: u64, reason: String) -> LogError {
    LogError::Corrupt {
        file: PathBuf::from(path),
        offset,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{encode_record, encode_segment_header, encode_snapshot};
    use crate::sim::SimStorage;

    fn dir() -> PathBuf {
        PathBuf::from("/r")
    }

    fn segment(first: Lsn, count: u64) -> Vec<u8> {
        let mut buf = encode_segment_header(first).to_vec();
        for lsn in first..first + count {
            encode_record(&mut buf, lsn, format!("p{lsn}").as_bytes());
        }
        buf
    }

    fn put_segment(sim: &SimStorage, first: Lsn, content: &[u8]) {
        sim.put_file(&dir().join(format::segment_file_name(first)), content);
    }

    fn lsns(r: &Recovered) -> Vec<Lsn> {
        r.records.iter().map(|(l, _)| *l).collect()
    }

    #[test]
    fn empty_directory_recovers_nothing() {
        let sim = SimStorage::new(1);
        sim.create_dir_all(&dir()).unwrap();
        let out = recover(&sim, &dir(), false, None).unwrap();
        assert_eq!(out.recovered, Recovered::default());
        assert_eq!(out.segments, 0);
    }

    /// Segments of LSNs 1–5, 6–10 and 11–13, and a snapshot at LSN 7.
    fn segments_1_6_11_and_a_snapshot_at_7() -> SimStorage {
        let sim = SimStorage::new(1);
        put_segment(&sim, 1, &segment(1, 5));
        put_segment(&sim, 6, &segment(6, 5));
        put_segment(&sim, 11, &segment(11, 3));
        sim.put_file(
            &dir().join(format::snapshot_file_name(7)),
            &encode_snapshot(7, [&b"state"[..]]),
        );
        sim
    }

    #[test]
    fn segments_chain_and_the_snapshot_cuts_the_prefix() {
        let sim = segments_1_6_11_and_a_snapshot_at_7();
        let out = recover(&sim, &dir(), false, None).unwrap();
        assert_eq!(out.recovered.snapshot_lsn, 7);
        assert_eq!(
            out.recovered.snapshot_items,
            vec![Bytes::from_static(b"state")]
        );
        assert_eq!(lsns(&out.recovered), vec![8, 9, 10, 11, 12, 13]);
        assert_eq!(out.recovered.records[0].1, Bytes::from_static(b"p8"));
        assert_eq!(out.recovered.last_lsn, 13);
        assert_eq!(out.recovered.records_recovered, 6);
        assert_eq!(out.recovered.snapshot_items_recovered, 1);
    }

    #[test]
    fn a_sink_gets_the_snapshot_then_each_segment_in_order() {
        let sim = segments_1_6_11_and_a_snapshot_at_7();
        let collected = recover(&sim, &dir(), false, None).unwrap().recovered;
        let mut got: Vec<String> = Vec::new();
        let mut records = Vec::new();
        let mut sink = |batch: RecoveryBatch<'_>| {
            match batch {
                RecoveryBatch::SnapshotItems(items) => got.push(format!("items {}", items.len())),
                RecoveryBatch::DiscardSnapshot => got.push("discard".into()),
                RecoveryBatch::Records(batch) => {
                    got.push(format!("records {}", batch.len()));
                    records.append(batch);
                }
            }
            Ok(())
        };
        let streamed = recover(&sim, &dir(), false, Some(&mut sink))
            .unwrap()
            .recovered;
        // The snapshot first, then the part of segment 6 after it, then segment 11.
        assert_eq!(got, ["items 1", "records 3", "records 3"]);
        assert_eq!(records, collected.records);
        assert!(streamed.records.is_empty() && streamed.snapshot_items.is_empty());
        assert_eq!(streamed.records_recovered, collected.records_recovered);
        assert_eq!(streamed.snapshot_items_recovered, 1);
        assert_eq!(streamed.last_lsn, collected.last_lsn);

        // A sink that fails stops recovery with its error.
        let mut failing = |_: RecoveryBatch<'_>| Err("no room".to_string());
        match recover(&sim, &dir(), false, Some(&mut failing)) {
            Err(LogError::Apply(why)) => assert_eq!(why, "no room"),
            other => panic!("expected Apply, got {:?}", other.map(|o| o.recovered)),
        }
    }

    /// One segment of LSNs 1–10 and a snapshot (one item, "three") at LSN 3, for a newer
    /// snapshot to be added over.
    fn records_1_to_10_and_a_snapshot_at_3() -> SimStorage {
        let sim = SimStorage::new(1);
        put_segment(&sim, 1, &segment(1, 10));
        sim.put_file(
            &dir().join(format::snapshot_file_name(3)),
            &encode_snapshot(3, [&b"three"[..]]),
        );
        sim
    }

    /// A sink gets the newest snapshot's items in batches while it is read; when damage shows at
    /// its end, the sink is told to discard them and gets the older snapshot's instead.
    #[test]
    fn a_sink_discards_a_snapshot_found_damaged_after_some_batches() {
        let sim = records_1_to_10_and_a_snapshot_at_3();
        let items: Vec<Vec<u8>> = (0..10u8).map(|i| vec![b'a' + i; 40]).collect();
        let mut newer = encode_snapshot(8, items.iter().map(|i| &i[..]));
        let last_item_byte = newer.len() - format::SNAPSHOT_TRAILER_LEN - 1;
        newer[last_item_byte] ^= 0x01;
        sim.put_file(&dir().join(format::snapshot_file_name(8)), &newer);
        let mut got: Vec<String> = Vec::new();
        let mut loaded: Vec<Bytes> = Vec::new();
        let mut sink = |batch: RecoveryBatch<'_>| {
            match batch {
                RecoveryBatch::SnapshotItems(items) => {
                    got.push(format!("items {}", items.len()));
                    loaded.extend(items);
                }
                RecoveryBatch::DiscardSnapshot => {
                    got.push("discard".into());
                    loaded.clear();
                }
                RecoveryBatch::Records(batch) => got.push(format!("records {}", batch.len())),
            }
            Ok(())
        };
        let out = recover(&sim, &dir(), false, Some(&mut sink)).unwrap();
        // Batches of two 40-byte items (64-byte batches in unit tests), all ten items; the
        // check at the end marker fails.
        assert_eq!(
            got,
            [
                "items 2",
                "items 2",
                "items 2",
                "items 2",
                "items 2",
                "discard",
                "items 1",
                "records 7"
            ]
        );
        assert_eq!(loaded, vec![Bytes::from_static(b"three")]);
        assert_eq!(out.recovered.snapshot_lsn, 3);
        assert_eq!(out.recovered.snapshot_items_recovered, 1);

        // A sink that rejects an item of the damaged snapshot is not an error: the damage is.
        let mut picky = |batch: RecoveryBatch<'_>| match batch {
            RecoveryBatch::SnapshotItems(items) if items[0].starts_with(b"a") => {
                Err("bad item".to_string())
            }
            _ => Ok(()),
        };
        let out = recover(&sim, &dir(), false, Some(&mut picky)).unwrap();
        assert_eq!(out.recovered.snapshot_lsn, 3);
    }

    #[test]
    fn a_damaged_snapshot_falls_back_to_the_previous_one() {
        let sim = records_1_to_10_and_a_snapshot_at_3();
        let mut newer = encode_snapshot(8, [&b"eight"[..]]);
        newer.truncate(newer.len() - 1);
        sim.put_file(&dir().join(format::snapshot_file_name(8)), &newer);
        sim.put_file(&dir().join(format::snapshot_temp_file_name(9)), b"partial");
        let out = recover(&sim, &dir(), false, None).unwrap();
        assert_eq!(out.recovered.snapshot_lsn, 3);
        assert_eq!(lsns(&out.recovered), (4..=10).collect::<Vec<_>>());
        assert!(!sim
            .file_names(&dir())
            .contains(&format::snapshot_temp_file_name(9)));
    }

    #[test]
    fn torn_tail_of_the_last_segment_is_truncated_durably() {
        let sim = SimStorage::new(1);
        put_segment(&sim, 1, &segment(1, 4));
        let mut last = segment(5, 3);
        let whole = last.len();
        last.truncate(whole - 2);
        put_segment(&sim, 5, &last);
        let out = recover(&sim, &dir(), false, None).unwrap();
        assert_eq!(lsns(&out.recovered), vec![1, 2, 3, 4, 5, 6]);
        // What is left of record 7 is its 16-byte header, whose last 7 bytes (the high bytes
        // of lsn 7) are zeros: torn bytes run through the last non-zero byte only, since
        // zeros after the records cannot be told apart from unused zero fill.
        assert_eq!(out.recovered.torn_tail_bytes, 9);
        let path = dir().join(format::segment_file_name(5));
        assert_eq!(
            sim.file_contents(&path).unwrap().len(),
            whole - (16 + 2) // record 7 ("p7", 2 bytes) is gone entirely
        );
    }

    #[test]
    fn damage_in_an_earlier_segment_is_an_error_with_offset() {
        let sim = SimStorage::new(1);
        let mut first = segment(1, 4);
        let offset = SEGMENT_HEADER_LEN + 16 + 2; // record 2
        first[offset + 17] ^= 0xff;
        put_segment(&sim, 1, &first);
        put_segment(&sim, 5, &segment(5, 2));
        match recover(&sim, &dir(), false, None) {
            Err(LogError::Corrupt {
                file, offset: at, ..
            }) => {
                assert_eq!(file, dir().join(format::segment_file_name(1)));
                assert_eq!(at, offset as u64);
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn repair_keeps_the_valid_prefix_and_sets_the_rest_aside() {
        let sim = SimStorage::new(7);
        put_segment(&sim, 1, &segment(1, 5));
        let mut damaged = segment(6, 5);
        let flip = damaged.len() / 2;
        damaged[flip] ^= 0xff;
        put_segment(&sim, 6, &damaged);
        put_segment(&sim, 11, &segment(11, 5));
        assert!(matches!(
            recover(&sim, &dir(), false, None),
            Err(LogError::Corrupt { .. })
        ));
        let out = recover(&sim, &dir(), true, None).unwrap();
        let got = lsns(&out.recovered);
        assert!(got.len() >= 5 && got.len() < 10, "{got:?}");
        assert_eq!(got, (1..=got.len() as u64).collect::<Vec<_>>());
        assert!(out.recovered.repaired.is_some());
        let names = sim.file_names(&dir());
        assert!(names.iter().any(|n| n.ends_with(".corrupt")), "{names:?}");
        // A second open finds a clean, shorter log.
        let again = recover(&sim, &dir(), false, None).unwrap();
        assert_eq!(lsns(&again.recovered), got);
    }

    #[test]
    fn a_missing_range_is_an_error() {
        let sim = SimStorage::new(1);
        put_segment(&sim, 1, &segment(1, 4));
        put_segment(&sim, 7, &segment(7, 2));
        assert!(matches!(
            recover(&sim, &dir(), false, None),
            Err(LogError::Corrupt { .. })
        ));

        let sim = SimStorage::new(1);
        sim.put_file(
            &dir().join(format::snapshot_file_name(3)),
            &encode_snapshot(3, std::iter::empty()),
        );
        put_segment(&sim, 6, &segment(6, 2));
        assert!(matches!(
            recover(&sim, &dir(), false, None),
            Err(LogError::Corrupt { .. })
        ));
    }

    #[test]
    fn a_torn_segment_creation_is_removed_but_a_damaged_header_with_records_is_not() {
        let sim = SimStorage::new(1);
        put_segment(&sim, 1, &segment(1, 3));
        put_segment(&sim, 4, &encode_segment_header(4)[..10]);
        let out = recover(&sim, &dir(), false, None).unwrap();
        assert_eq!(out.recovered.last_lsn, 3);
        // Magic and the first version byte; the zero byte after them counts as zero fill.
        assert_eq!(out.recovered.torn_tail_bytes, 9);
        assert_eq!(out.segments, 1);

        // The same with the zero fill a segment is created with, or with zeros only.
        for (head, torn) in [(10, 9), (0, 0)] {
            let sim = SimStorage::new(1);
            put_segment(&sim, 1, &segment(1, 3));
            let mut created = encode_segment_header(4)[..head].to_vec();
            created.resize(4096, 0);
            put_segment(&sim, 4, &created);
            let out = recover(&sim, &dir(), false, None).unwrap();
            assert_eq!(out.recovered.last_lsn, 3);
            assert_eq!(out.recovered.torn_tail_bytes, torn);
            assert_eq!(out.segments, 1);
        }

        let sim = SimStorage::new(1);
        let mut bad = segment(1, 3);
        bad[3] ^= 1;
        put_segment(&sim, 1, &bad);
        assert!(matches!(
            recover(&sim, &dir(), false, None),
            Err(LogError::Corrupt { offset: 0, .. })
        ));
    }

    /// `content` followed by zeros up to `len` bytes: a zero-filled segment.
    fn zero_fill(mut content: Vec<u8>, len: usize) -> Vec<u8> {
        content.resize(len, 0);
        content
    }

    #[test]
    fn a_zero_filled_last_segment_after_a_clean_close_has_no_torn_bytes() {
        let sim = SimStorage::new(1);
        let records = segment(1, 5);
        put_segment(&sim, 1, &zero_fill(records.clone(), 64 << 10));
        let out = recover(&sim, &dir(), false, None).unwrap();
        assert_eq!(lsns(&out.recovered), vec![1, 2, 3, 4, 5]);
        assert_eq!(out.recovered.torn_tail_bytes, 0);
        assert_eq!(out.segments, 1);
        // Cut to its records (durably: `truncate` is), so new records never go into it.
        let path = dir().join(format::segment_file_name(1));
        assert_eq!(sim.file_contents(&path).unwrap(), records);
        // A zero-filled last segment without records is removed.
        put_segment(&sim, 6, &zero_fill(segment(6, 0), 4096));
        let out = recover(&sim, &dir(), false, None).unwrap();
        assert_eq!(
            (out.recovered.last_lsn, out.recovered.torn_tail_bytes),
            (5, 0)
        );
        assert_eq!(out.segments, 1);
        assert_eq!(sim.file_names(&dir()), vec![format::segment_file_name(1)]);
    }

    #[test]
    fn a_torn_record_in_zero_fill_counts_through_its_last_non_zero_byte() {
        let sim = SimStorage::new(1);
        let whole = segment(1, 4);
        let valid = segment(1, 3).len();
        // The first 13 bytes of record 4 (its lsn's low byte is its 9th), then zeros, then a
        // stray non-zero byte further on.
        let mut data = zero_fill(whole[..valid + 13].to_vec(), 10_000);
        data[5_000] = 0xAB;
        put_segment(&sim, 1, &data);
        let out = recover(&sim, &dir(), false, None).unwrap();
        assert_eq!(lsns(&out.recovered), vec![1, 2, 3]);
        assert_eq!(out.recovered.torn_tail_bytes, (5_000 + 1 - valid) as u64);
        let path = dir().join(format::segment_file_name(1));
        assert_eq!(sim.file_contents(&path).unwrap().len(), valid);

        // Without the stray byte, only the torn record's non-zero bytes count.
        let sim = SimStorage::new(1);
        put_segment(&sim, 1, &zero_fill(whole[..valid + 13].to_vec(), 10_000));
        let out = recover(&sim, &dir(), false, None).unwrap();
        assert_eq!(out.recovered.torn_tail_bytes, 9);
    }

    #[test]
    fn a_zero_tail_in_a_middle_segment_is_unused_space() {
        let sim = SimStorage::new(1);
        let first = zero_fill(segment(1, 4), 8192);
        put_segment(&sim, 1, &first);
        put_segment(&sim, 5, &zero_fill(segment(5, 3), 8192));
        put_segment(&sim, 8, &zero_fill(segment(8, 2), 8192));
        let out = recover(&sim, &dir(), false, None).unwrap();
        assert_eq!(lsns(&out.recovered), (1..=9).collect::<Vec<_>>());
        assert_eq!(out.recovered.torn_tail_bytes, 0);
        assert_eq!(out.segments, 3);
        // Middle segments are left as they are; only the last one is cut.
        let path = |first| dir().join(format::segment_file_name(first));
        assert_eq!(sim.file_contents(&path(1)).unwrap(), first);
        assert_eq!(sim.file_contents(&path(8)).unwrap(), segment(8, 2));
    }

    #[test]
    fn records_lost_to_zeros_in_a_middle_segment_break_the_chain() {
        let sim = SimStorage::new(1);
        let mut first = zero_fill(segment(1, 4), 8192);
        let record_3 = segment(1, 2).len();
        first[record_3..].fill(0); // records 3 and 4 read as zero fill
        put_segment(&sim, 1, &first);
        put_segment(&sim, 5, &segment(5, 2));
        match recover(&sim, &dir(), false, None) {
            Err(LogError::Corrupt { file, .. }) => {
                assert_eq!(file, dir().join(format::segment_file_name(5)))
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn junk_after_a_zero_gap_in_a_middle_segment_is_corrupt() {
        let build = || {
            let sim = SimStorage::new(1);
            let mut first = zero_fill(segment(1, 4), 8192);
            first[6000] = 1;
            put_segment(&sim, 1, &first);
            put_segment(&sim, 5, &zero_fill(segment(5, 2), 8192));
            sim
        };
        let valid = segment(1, 4).len() as u64;
        let sim = build();
        match recover(&sim, &dir(), false, None) {
            Err(LogError::Corrupt { file, offset, .. }) => {
                assert_eq!(file, dir().join(format::segment_file_name(1)));
                assert_eq!(offset, valid);
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
        // Repair keeps the valid prefix and counts only non-zero bytes as set aside.
        let out = recover(&sim, &dir(), true, None).unwrap();
        assert_eq!(lsns(&out.recovered), vec![1, 2, 3, 4]);
        let report = out.recovered.repaired.unwrap();
        let set_aside = 6000 + 1 - valid + segment(5, 2).len() as u64;
        assert!(
            report.contains(&format!("set aside {set_aside} bytes")),
            "{report}"
        );
        let path = dir().join(format::segment_file_name(1));
        assert_eq!(sim.file_contents(&path).unwrap().len() as u64, valid);
    }

    #[test]
    fn a_newer_format_version_is_refused() {
        let sim = SimStorage::new(1);
        let mut header = encode_segment_header(1);
        header[8..12].copy_from_slice(&9u32.to_le_bytes());
        let crc = crc32c::crc32c(&header[0..20]);
        header[20..24].copy_from_slice(&crc.to_le_bytes());
        put_segment(&sim, 1, &header);
        assert!(matches!(
            recover(&sim, &dir(), false, None),
            Err(LogError::UnsupportedVersion { version: 9, .. })
        ));
    }

    #[test]
    fn segments_before_the_snapshot_are_not_read() {
        let sim = SimStorage::new(1);
        put_segment(&sim, 1, b"garbage that is never looked at");
        put_segment(&sim, 5, &segment(5, 3));
        sim.put_file(
            &dir().join(format::snapshot_file_name(6)),
            &encode_snapshot(6, std::iter::empty()),
        );
        let out = recover(&sim, &dir(), false, None).unwrap();
        assert_eq!(lsns(&out.recovered), vec![7]);
        assert_eq!(out.recovered.last_lsn, 7);
    }
}
