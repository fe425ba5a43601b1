//! [`LogStats`]: counters the writer keeps for `INFO` and the Prometheus endpoint — fsync
//! count and latency, group-commit batch sizes, bytes written, segments, poisoning.
//!
//! Plain data; the writer updates its private copy under a mutex after each write or fsync
//! (never during one), and [`crate::Log::stats`] copies it out.

use crate::Lsn;

/// Number of buckets in [`LogStats::batch_histogram`].
pub const BATCH_BUCKETS: usize = 16;
/// Number of buckets in [`LogStats::fsync_histogram`].
pub const FSYNC_BUCKETS: usize = 26;

/// The [`LogStats::fsync_histogram`] bucket of an fsync that took `micros`: bucket `i` holds
/// durations under `2^i` µs (bucket 0: under 1 µs); the last bucket is open-ended.
pub fn fsync_bucket(micros: u64) -> usize {
    (64 - micros.leading_zeros() as usize).min(FSYNC_BUCKETS - 1)
}

/// A point-in-time copy of the log's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogStats {
    /// LSN of the last appended record.
    pub last_lsn: Lsn,
    /// LSN of the last record handed to the OS.
    pub written_lsn: Lsn,
    /// LSN of the last record covered by an fsync.
    pub durable_lsn: Lsn,
    /// `fdatasync` calls on segment files that succeeded (including the header sync of each
    /// new segment).
    pub fsyncs: u64,
    /// Directory fsyncs (new segments, snapshots, deletions).
    pub dir_fsyncs: u64,
    /// Duration of the last segment fsync, microseconds.
    pub last_fsync_micros: u64,
    /// Longest segment fsync so far, microseconds.
    pub max_fsync_micros: u64,
    /// Sum of all segment fsync durations, microseconds (divide by `fsyncs` for the mean).
    pub total_fsync_micros: u64,
    /// Segment fsync durations: bucket `i` counts the fsyncs that took under `2^i` µs and at
    /// least `2^(i-1)` (see [`fsync_bucket`]); the last bucket is open-ended.
    pub fsync_histogram: [u64; FSYNC_BUCKETS],
    /// Longest segment fsync since [`crate::Log::take_fsync_peak`] last read it, microseconds
    /// (the latency monitor's `fsync` event).
    pub fsync_peak_micros: u64,
    /// Records made durable by fsyncs so far (divide by `commit_fsyncs` for the mean batch).
    pub records_synced: u64,
    /// Fsyncs that made at least one record durable (group commits).
    pub commit_fsyncs: u64,
    /// Group-commit batch sizes (records made durable by one fsync): bucket `i` counts the
    /// fsyncs that covered `2^i ..= 2^(i+1) - 1` records; the last bucket is open-ended.
    pub batch_histogram: [u64; BATCH_BUCKETS],
    /// `write` calls on segment files.
    pub writes: u64,
    /// Bytes of log written to segment files: records and segment headers. This is how much
    /// the log grew, not the files' size on disk (see `zero_fill_bytes`).
    pub bytes_written: u64,
    /// Zero bytes written ahead of the records to zero-fill segments (not in `bytes_written`,
    /// not in `writes`); records later overwrite them in place.
    pub zero_fill_bytes: u64,
    /// Segment files currently in the directory.
    pub segments: u64,
    /// LSN of the newest snapshot written or recovered (0 if none).
    pub snapshot_lsn: Lsn,
    /// Why the log is poisoned, if it is.
    pub poisoned: Option<String>,
    /// Writes (or segment creations) the writer made again because the disk was full.
    pub disk_full_retries: u64,
    /// `background` appends made while an unsynced background record was older than twice the
    /// bound (their replies are held until durable, so the loss window stays bounded).
    pub late_background: u64,
    /// The active segment is written with direct I/O (see [`crate::OsStorage`]).
    pub direct_io: bool,
}

impl LogStats {
    /// Mean number of records per group-commit fsync (0 if none yet).
    pub fn mean_batch(&self) -> f64 {
        if self.commit_fsyncs == 0 {
            0.0
        } else {
            self.records_synced as f64 / self.commit_fsyncs as f64
        }
    }

    /// Mean segment fsync latency in microseconds (0 if none yet).
    pub fn mean_fsync_micros(&self) -> f64 {
        if self.fsyncs == 0 {
            0.0
        } else {
            self.total_fsync_micros as f64 / self.fsyncs as f64
        }
    }

    /// Records the fsync of a batch of `records` records that took `micros`.
    pub(crate) fn record_fsync(&mut self, micros: u64, records: u64) {
        self.fsyncs += 1;
        self.last_fsync_micros = micros;
        self.max_fsync_micros = self.max_fsync_micros.max(micros);
        self.total_fsync_micros += micros;
        self.fsync_histogram[fsync_bucket(micros)] += 1;
        self.fsync_peak_micros = self.fsync_peak_micros.max(micros);
        if records > 0 {
            self.records_synced += records;
            self.commit_fsyncs += 1;
            let bucket = (63 - records.leading_zeros() as usize).min(BATCH_BUCKETS - 1);
            self.batch_histogram[bucket] += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_histogram_buckets_by_power_of_two() {
        let mut s = LogStats::default();
        for records in [1, 2, 3, 4, 7, 8, 1 << 40] {
            s.record_fsync(10, records);
        }
        s.record_fsync(5, 0);
        assert_eq!(s.fsyncs, 8);
        assert_eq!(s.commit_fsyncs, 7);
        assert_eq!(&s.batch_histogram[..4], &[1, 2, 2, 1]);
        assert_eq!(s.batch_histogram[BATCH_BUCKETS - 1], 1);
        assert_eq!(s.max_fsync_micros, 10);
        assert_eq!(s.last_fsync_micros, 5);
        assert_eq!(s.fsync_histogram[fsync_bucket(10)], 7);
        assert_eq!(s.fsync_histogram[fsync_bucket(5)], 1);
        assert_eq!(s.fsync_peak_micros, 10);
    }

    #[test]
    fn fsync_buckets_are_powers_of_two_of_microseconds() {
        assert_eq!(fsync_bucket(0), 0);
        assert_eq!(fsync_bucket(1), 1);
        assert_eq!(fsync_bucket(2), 2);
        assert_eq!(fsync_bucket(3), 2);
        assert_eq!(fsync_bucket(4), 3);
        assert_eq!(fsync_bucket(u64::MAX), FSYNC_BUCKETS - 1);
    }
}
