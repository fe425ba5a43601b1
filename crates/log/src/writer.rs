//! The writer thread and the state it shares with [`crate::Log`] handles: batching, group
//! commit, segment rotation, publishing the written/durable LSNs, and poisoning.
//!
//! Group commit, in the shape of raft-engine's write barrier: appenders only queue; the writer
//! thread is the leader of every batch. Whatever was queued while the previous write+fsync
//! ran becomes the next batch, goes to the OS in one `write`, and — if it holds a `strict`
//! record or a `sync_now` request — is covered by one `fdatasync`. Concurrent strict writers
//! therefore share an fsync instead of queueing one each, and their replies are released
//! together when the durable LSN moves past them.
//!
//! When the writer acts (otherwise it sleeps on a condvar with a deadline):
//! - a `strict` record or a `sync_now` is queued → write everything queued, fsync now;
//! - the oldest unsynced `background` record is about to reach `background_fsync_ms` (less the
//!   last fsync's duration, so the fsync *ends* in time) → write everything, fsync;
//! - the oldest queued record reaches `lazy_flush_ms`, or `buffer_bytes` are queued → write
//!   everything, no fsync of its own (a later fsync covers it: the log is ordered);
//! - shutdown → write everything, fsync, exit.
//!
//! While zero fill is on (always by default; or while commits that someone waits for — a
//! `strict` record or a `sync_now` — are being made within [`LogOptions::zero_fill_window`]),
//! segments are zero-filled ahead of their records
//! (why: see the crate docs): every write keeps the zero fill at least a chunk ahead of its end
//! (chunk boundaries, never past `segment_bytes`; a record larger than that extends the file),
//! and a segment started meanwhile is created with its first [`ZERO_FILL_CHUNK`] of zeros
//! before its fsyncs. On real files the fill ahead is written and fdatasynced by a short-lived
//! `gradus-log-fill` thread ([`StorageFile::preallocate_ahead`]), so no batch waits for it
//! unless the records catch up with a fill still in progress. Records then overwrite durable
//! zeros in place, so the writer's fsyncs are data-only. With zero fill off (outside a window:
//! only `background` and `lazy` records, whose fsyncs nobody waits for) records are plainly
//! appended: the file grows and an fsync commits its size too, instead of every byte being
//! written twice. The zero fill counts in [`LogStats::zero_fill_bytes`], not
//! in `bytes_written`.
//!
//! A segment is fsynced before the next one is started, so after any crash only the last
//! segment can hold unsynced (torn) bytes — recovery relies on that. A failed fsync (or write)
//! poisons the log: the reason is kept forever, the durable LSN never moves again, every
//! waiter is woken with the error, and the fsync is never retried (after a write-back error
//! Linux may have dropped the dirty pages, so a retry could "succeed" without the data).
//!
//! The exception is a full disk (`ENOSPC`, or `EDQUOT` for a quota). A write refused for want
//! of space wrote nothing the log relies on, and nothing was lost from the page cache, so the
//! writer keeps the records and tries the same write again every
//! [`LogOptions::disk_full_retry`], as Redis does for its append-only file. Meanwhile
//! [`Shared::stalled`] says why (the server refuses durable writes, as Redis' `MISCONF`), the
//! durable LSN stays put, and waits for durability end with [`LogError::Stalled`] rather than
//! block for as long as the disk stays full (a `strict` writer is not acknowledged; its record
//! is kept and written later all the same, as after any lost reply); once the write succeeds
//! everything goes on where it stopped. A zero fill that finds the disk full is left for later
//! (records then extend the file), and a segment that cannot be created is created again. Shut
//! down while the disk is still full, the log is poisoned with a reason that names the last
//! durable LSN: what came after it was acknowledged (`lazy`, `background`) but never written.
//!
//! Depends on [`crate::format`] and [`crate::storage`]; knows nothing about payload meaning.

use std::io::IoSlice;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::error::LogError;
use crate::format::{self, encode_record_header, encoded_record_len};
use crate::options::LogOptions;
use crate::stats::LogStats;
use crate::storage::{is_disk_full, Storage, StorageFile};
use crate::waiters::DurableWaiters;
use crate::Lsn;

/// Records appended but not yet taken by the writer.
pub(crate) struct Queue {
    /// Payloads of LSNs `first_lsn ..`, in order.
    pub records: Vec<Bytes>,
    /// LSN of `records[0]` (equals `next_lsn` when the queue is empty).
    pub first_lsn: Lsn,
    /// LSN the next append gets.
    pub next_lsn: Lsn,
    /// Encoded size of the queued records.
    pub bytes: usize,
    /// The writer must fsync until the durable LSN reaches this (strict appends, `sync_now`).
    pub sync_target: Lsn,
    /// When the oldest queued record was appended (lazy flush deadline).
    pub oldest: Option<Instant>,
    /// Earliest fsync deadline of the queued `background` records.
    pub background_deadline: Option<Instant>,
    /// Earliest fsync deadline of `background` records the writer has taken but not yet covered
    /// by an fsync (a copy of the writer's own, for appenders: with `background_deadline` it
    /// tells them whether the writer is late; see [`crate::Log::append_bounded`]).
    pub taken_background_deadline: Option<Instant>,
    /// No more appends; the writer drains the queue, fsyncs and exits.
    pub shutdown: bool,
}

/// State shared by every [`crate::Log`] handle and the writer thread.
pub(crate) struct Shared {
    pub opts: LogOptions,
    pub storage: Arc<dyn Storage>,
    /// Appenders push to it and the writer swaps its `Vec` out. Held only for those O(1)
    /// steps — never during I/O, never across an `.await`.
    pub queue: Mutex<Queue>,
    /// Wakes the writer (paired with `queue`): a strict record, a sync request, the first
    /// record of a quiet period, a full buffer, or shutdown.
    pub writer_wakeup: Condvar,
    /// Wakes appenders waiting for queue space (back-pressure); notified when the writer takes
    /// the queue, on poisoning and on shutdown.
    pub queue_space: Condvar,
    /// Mirrors `queue.next_lsn - 1`, readable without the lock.
    pub last_lsn: AtomicU64,
    /// LSN of the last record handed to the OS. Written only by the writer thread.
    pub written_lsn: AtomicU64,
    /// LSN of the last record covered by an fsync. Written only by the writer thread, before
    /// the waiters are notified, and never again once the log is poisoned.
    pub durable_lsn: AtomicU64,
    /// Records the last fsync made durable (a copy of the writer's `last_commit_records`):
    /// how many writers tend to wait on one fsync together.
    pub last_commit_records: AtomicU64,
    /// Async waiters (`wait_durable`), woken in LSN order as commits cover them; all of them
    /// on poisoning and on exit.
    pub durable_waiters: DurableWaiters,
    /// Blocking waiters wait on `durable_cv` holding this lock; the writer takes it to notify,
    /// so a waiter that checked the atomics under the lock cannot miss a wakeup.
    pub durable_lock: Mutex<()>,
    pub durable_cv: Condvar,
    /// Why the log is poisoned; set once, by the writer, never cleared.
    pub poison: OnceLock<String>,
    /// Why the writer cannot write just now (the disk is full); set and cleared by the writer.
    pub stalled: Mutex<Option<String>>,
    /// Whether `stalled` is set, readable without its lock (every durable write checks it).
    pub is_stalled: AtomicBool,
    /// Set by the writer thread just before it exits.
    pub writer_exited: AtomicBool,
    /// Counters; the writer updates them between I/O operations, `stats()` copies them.
    pub stats: Mutex<LogStats>,
    /// Segment files in the directory (writer adds, snapshot cleanup subtracts).
    pub segments: AtomicU64,
    /// LSN of the newest snapshot written or recovered.
    pub snapshot_lsn: AtomicU64,
    /// `background` appends that found the writer late (see [`crate::Log::append_bounded`]).
    pub late_background: AtomicU64,
    /// Serializes `write_snapshot` calls. Held across snapshot file I/O on the caller's thread
    /// (which must therefore not be an async task: use `spawn_blocking`), never by the writer.
    pub snapshot_lock: Mutex<()>,
}

impl Shared {
    pub fn poisoned(&self) -> Option<String> {
        self.poison.get().cloned()
    }

    pub fn stalled(&self) -> Option<String> {
        if !self.is_stalled.load(Ordering::Acquire) {
            return None;
        }
        self.stalled.lock().clone()
    }

    pub fn poisoned_error(&self) -> Option<LogError> {
        self.poison
            .get()
            .map(|reason| LogError::Poisoned(reason.clone()))
    }

    /// Why a wait for durability must end now without success: the poison, or the stall.
    pub fn wait_error(&self) -> Option<LogError> {
        self.poisoned_error()
            .or_else(|| self.stalled().map(LogError::Stalled))
    }

    /// Wakes every waiter of both kinds so it re-checks the durable LSN, poison and exit.
    pub fn wake_waiters(&self) {
        self.queue_space.notify_all();
        self.durable_waiters.wake_all();
        let _guard = self.durable_lock.lock();
        self.durable_cv.notify_all();
    }
}

/// A segment is zero-filled this many bytes at a time, ahead of its records.
pub(crate) const ZERO_FILL_CHUNK: u64 = 4 << 20;

/// How far a segment must be zero-filled for a write ending at `end` to land in zeros: `end`
/// rounded up to a whole chunk, but never past `segment_bytes` (so a small segment is
/// zero-filled to its size in one go, and a record that overflows it extends the file).
pub(crate) fn zero_fill_target(end: u64, segment_bytes: u64) -> u64 {
    end.div_ceil(ZERO_FILL_CHUNK)
        .saturating_mul(ZERO_FILL_CHUNK)
        .min(segment_bytes)
}

/// A segment [`create_segment`] made.
pub(crate) struct NewSegment {
    pub file: Box<dyn StorageFile>,
    /// How long its `fdatasync` took.
    pub fsync_time: Duration,
    /// The file is zero-filled (or written) up to here.
    pub zero_filled: u64,
}

/// Creates the segment whose first record will be `first_lsn` (through
/// [`Storage::create_padded`]: recovery takes zeros after the records for unused space):
/// header, zero fill of the first chunk if `zero_fill`, `fdatasync`, then a directory fsync — all before any record goes in,
/// so a segment that holds records always has a durable header, durable zero fill (if any) and
/// a durable name.
pub(crate) fn create_segment(
    storage: &dyn Storage,
    dir: &Path,
    first_lsn: Lsn,
    segment_bytes: u64,
    zero_fill: bool,
) -> Result<NewSegment, LogError> {
    let path = dir.join(format::segment_file_name(first_lsn));
    let mut file = storage
        .create_padded(&path)
        .map_err(LogError::io_at("create", &path))?;
    file.append(&format::encode_segment_header(first_lsn))
        .map_err(LogError::io_at("write", &path))?;
    let header_end = format::SEGMENT_HEADER_LEN as u64;
    let zero_filled = if zero_fill {
        zero_fill_target(header_end + 1, segment_bytes).max(header_end)
    } else {
        header_end
    };
    file.preallocate(zero_filled)
        .map_err(LogError::io_at("zero-fill", &path))?;
    let started = Instant::now();
    file.sync_data()
        .map_err(|e| LogError::Poisoned(format!("fsync failed: {}: {e}", path.display())))?;
    let fsync_time = started.elapsed();
    storage
        .sync_dir(dir)
        .map_err(LogError::io_at("sync_dir", dir))?;
    Ok(NewSegment {
        file,
        fsync_time,
        zero_filled,
    })
}

/// What the writer took from the queue in one go.
struct Batch {
    first_lsn: Lsn,
    /// Whether this round must end with an fsync.
    sync: bool,
    /// The queue was drained for shutdown: exit after this round.
    shutdown: bool,
}

/// The writer thread's private state.
pub(crate) struct Writer {
    shared: Arc<Shared>,
    segment: Box<dyn StorageFile>,
    segment_path: PathBuf,
    /// Records in the active segment.
    segment_records: u64,
    /// The active segment is zero-filled (or written) up to this offset.
    segment_zero_filled: u64,
    /// Local copies of the published LSNs (only this thread changes them).
    written: Lsn,
    durable: Lsn,
    /// Earliest fsync deadline of background records already written but not yet fsynced.
    unsynced_background_deadline: Option<Instant>,
    /// Duration of the last fsync: background batches start this much before their deadline.
    last_fsync: Duration,
    /// Records made durable by the last commit fsync: how many strict writers tend to be in
    /// flight together (used to decide whether gathering a batch is worth a short wait).
    last_commit_records: u64,
    /// The batch being written holds a strict record (or a sync request): after its commit,
    /// linger for `strict_linger` before sleeping.
    linger_after_commit: bool,
    /// When the writer last took a batch that someone waits on the fsync of (a strict record
    /// or a sync request): zero fill stays on for `zero_fill_window` after it.
    last_waited_commit: Option<Instant>,
    /// The batch being written (swapped with the queue's `Vec` to reuse both allocations).
    batch: Vec<Bytes>,
    /// The records encoded for the next write, reused.
    buf: Outgoing,
    /// LSN of the last record encoded into `buf`.
    buf_last_lsn: Lsn,
    buf_records: u64,
    /// Since when the disk has been full (see the module docs).
    stalled_since: Option<Instant>,
}

/// Payloads at least this large are written from where they are (a slice of a vectored write);
/// smaller ones are copied next to their headers, which is cheaper than a slice each.
const WRITE_IN_PLACE_MIN: usize = 512;

/// Records encoded for one write: each record's header (and a small payload) copied into
/// `staged`, a large payload kept by reference, so the write is one `pwritev` over the
/// staged runs and the payloads instead of a copy of every payload into one buffer (for 4 KiB
/// session records that copy was the writer thread's largest cost).
#[derive(Default)]
struct Outgoing {
    staged: Vec<u8>,
    /// In write order: a run of `staged` (ending at the offset given; it starts where the
    /// previous run ended), or a payload.
    parts: Vec<Part>,
    /// Bytes in all parts.
    len: u64,
}

enum Part {
    Staged(usize),
    Payload(Bytes),
}

impl Outgoing {
    fn push(&mut self, lsn: Lsn, payload: &Bytes) {
        self.staged
            .extend_from_slice(&encode_record_header(lsn, payload));
        if payload.len() >= WRITE_IN_PLACE_MIN {
            self.parts.push(Part::Staged(self.staged.len()));
            self.parts.push(Part::Payload(payload.clone()));
        } else {
            self.staged.extend_from_slice(payload);
        }
        self.len += encoded_record_len(payload.len()) as u64;
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slices to write, in order.
    fn slices(&self) -> Vec<IoSlice<'_>> {
        let mut slices = Vec::with_capacity(self.parts.len() + 1);
        let mut start = 0;
        for part in &self.parts {
            match part {
                Part::Staged(end) => {
                    if *end > start {
                        slices.push(IoSlice::new(&self.staged[start..*end]));
                    }
                    start = *end;
                }
                Part::Payload(payload) => slices.push(IoSlice::new(payload)),
            }
        }
        if self.staged.len() > start {
            slices.push(IoSlice::new(&self.staged[start..]));
        }
        slices
    }

    fn clear(&mut self) {
        self.staged.clear();
        self.parts.clear();
        self.len = 0;
    }
}

/// Marker: the writer poisoned the log and must stop.
struct Stop;

impl Writer {
    pub fn new(
        shared: Arc<Shared>,
        segment: NewSegment,
        segment_first_lsn: Lsn,
        recovered_last: Lsn,
    ) -> Writer {
        let segment_path = shared
            .opts
            .dir
            .join(format::segment_file_name(segment_first_lsn));
        Writer {
            shared,
            segment: segment.file,
            segment_path,
            segment_records: 0,
            segment_zero_filled: segment.zero_filled,
            written: recovered_last,
            durable: recovered_last,
            unsynced_background_deadline: None,
            last_fsync: Duration::ZERO,
            last_commit_records: 0,
            linger_after_commit: false,
            last_waited_commit: None,
            batch: Vec::new(),
            buf: Outgoing::default(),
            buf_last_lsn: recovered_last,
            buf_records: 0,
            stalled_since: None,
        }
    }

    /// The thread body: loop until shutdown or poison, then tell every waiter.
    pub fn run(mut self) {
        loop {
            let batch = self.next_batch();
            if self.write_and_sync(&batch).is_err() || batch.shutdown {
                break;
            }
        }
        self.shared.writer_exited.store(true, Ordering::Release);
        self.shared.wake_waiters();
    }

    fn write_and_sync(&mut self, batch: &Batch) -> Result<(), Stop> {
        if !self.batch.is_empty() {
            self.write_batch(batch.first_lsn)?;
        }
        if batch.sync && self.written > self.durable {
            self.fsync()?;
        }
        Ok(())
    }

    /// Sleeps until there is something to do, then takes the whole queue.
    fn next_batch(&mut self) -> Batch {
        let lazy_flush = Duration::from_millis(self.shared.opts.lazy_flush_ms);
        let background_bound = Duration::from_millis(self.shared.opts.background_fsync_ms);
        // Start a background fsync early by the last fsync's duration (at most half the
        // bound), so that it completes, not merely starts, within the bound.
        let background_margin = self.last_fsync.min(background_bound / 2);
        let buffer_bytes = self.shared.opts.buffer_bytes;
        let mut gathered = false;
        let mut queue = self.shared.queue.lock();
        loop {
            let now = Instant::now();
            let background_deadline =
                match (queue.background_deadline, self.unsynced_background_deadline) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            let background_wake =
                background_deadline.map(|d| d.checked_sub(background_margin).unwrap_or(d));
            let lazy_wake = queue.oldest.map(|t| t + lazy_flush);
            let sync_requested = queue.sync_target > self.durable;
            let background_due = background_wake.is_some_and(|t| t <= now);
            let lazy_due = lazy_wake.is_some_and(|t| t <= now);
            let buffer_full = queue.bytes >= buffer_bytes;
            // Group commit gathering (like MySQL's binlog_group_commit_sync_delay, but adaptive):
            // when the last commit covered several concurrent writers, their next writes are
            // usually a few microseconds behind the first one; wait a fraction of an fsync for
            // them (at most until as many are queued as last time), so one fsync covers them
            // all instead of the first one alone. A lone writer (last batch of 1) never waits.
            if sync_requested && !queue.shutdown && !gathered && self.last_commit_records >= 2 {
                gathered = true;
                let target = self.last_commit_records as usize;
                let deadline = now + self.last_fsync.min(Duration::from_micros(500));
                while queue.records.len() < target && Instant::now() < deadline {
                    self.shared.writer_wakeup.wait_until(&mut queue, deadline);
                }
                continue;
            }
            if queue.shutdown || sync_requested || background_due || lazy_due || buffer_full {
                self.batch.clear();
                std::mem::swap(&mut queue.records, &mut self.batch);
                self.shared.queue_space.notify_all();
                let first_lsn = queue.first_lsn;
                queue.first_lsn = queue.next_lsn;
                queue.bytes = 0;
                queue.oldest = None;
                if let Some(deadline) = queue.background_deadline.take() {
                    self.unsynced_background_deadline = Some(
                        self.unsynced_background_deadline
                            .map_or(deadline, |d| d.min(deadline)),
                    );
                }
                queue.taken_background_deadline = self.unsynced_background_deadline;
                self.linger_after_commit = sync_requested;
                if sync_requested {
                    self.last_waited_commit = Some(now);
                }
                return Batch {
                    first_lsn,
                    sync: queue.shutdown || sync_requested || background_due,
                    shutdown: queue.shutdown,
                };
            }
            // Right after a strict commit, the writers it released usually send their next
            // write within a network round trip: watch for it for a moment instead of going to
            // sleep, so that write does not pay a thread wake-up (tens of microseconds on a VM)
            // before its fsync can start. Once per commit; the lock is released meanwhile.
            // Only after small commits: with many concurrent writers the next records come
            // soon anyway and one wake-up serves a whole batch, while spinning would take CPU
            // from the threads producing them.
            if std::mem::take(&mut self.linger_after_commit) && self.last_commit_records <= 2 {
                let linger = self.shared.opts.strict_linger;
                if !linger.is_zero() {
                    let seen = queue.next_lsn;
                    let until = now + linger;
                    let shared = Arc::clone(&self.shared);
                    MutexGuard::unlocked(&mut queue, || {
                        let mut spins = 0u32;
                        while shared.last_lsn.load(Ordering::Acquire) < seen {
                            std::hint::spin_loop();
                            spins = spins.wrapping_add(1);
                            if spins.is_multiple_of(64) && Instant::now() >= until {
                                break;
                            }
                        }
                    });
                    continue;
                }
            }
            let wake = match (background_wake, lazy_wake) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            match wake {
                Some(at) => {
                    self.shared.writer_wakeup.wait_until(&mut queue, at);
                }
                None => self.shared.writer_wakeup.wait(&mut queue),
            }
        }
    }

    /// Encodes and writes `self.batch` (LSNs from `first_lsn`), rotating segments at record
    /// boundaries when the active one would grow past `segment_bytes`.
    fn write_batch(&mut self, first_lsn: Lsn) -> Result<(), Stop> {
        let segment_bytes = self.shared.opts.segment_bytes;
        let batch = std::mem::take(&mut self.batch);
        for (lsn, payload) in (first_lsn..).zip(batch.iter()) {
            let record_len = encoded_record_len(payload.len()) as u64;
            let has_records = self.segment_records + self.buf_records > 0;
            if has_records && self.segment.len() + self.buf.len + record_len > segment_bytes {
                self.flush_buf()?;
                self.rotate(lsn)?;
            }
            self.buf.push(lsn, payload);
            self.buf_last_lsn = lsn;
            self.buf_records += 1;
        }
        self.batch = batch;
        self.batch.clear();
        self.flush_buf()
    }

    /// Whether segments are zero-filled ahead of their records now (see the module docs).
    fn zero_fill_wanted(&self) -> bool {
        let window = self.shared.opts.zero_fill_window;
        window == Duration::MAX
            || self
                .last_waited_commit
                .is_some_and(|t| t.elapsed() < window)
    }

    /// Hands the encoded buffer to the OS, publishes the written LSN, and — while zero fill is
    /// wanted — asks for the zero fill to be kept a chunk ahead of the new end.
    fn flush_buf(&mut self) -> Result<(), Stop> {
        if self.buf.is_empty() {
            return Ok(());
        }
        loop {
            let written = self.segment.append_vectored(&self.buf.slices());
            match written {
                Ok(()) => break,
                Err(e) => {
                    let reason = format!("write failed: {}: {e}", self.segment_path.display());
                    if !is_disk_full(&e) {
                        return Err(self.poison(reason));
                    }
                    self.wait_for_space(reason)?;
                }
            }
        }
        self.space_again();
        // Past the zero fill (none asked for, or a record larger than the segment limit) the
        // append extended the file.
        self.segment_zero_filled = self.segment_zero_filled.max(self.segment.len());
        let mut zero_filled = 0;
        // Keep about a chunk of zero fill ahead of the records, written (and fsynced) off this
        // thread where the storage can, so no batch waits for a fill; if the records catch up
        // with a fill still being written, the append waits for the part it needs.
        let ahead = zero_fill_target(
            self.segment.len() + ZERO_FILL_CHUNK,
            self.shared.opts.segment_bytes,
        );
        if ahead > self.segment_zero_filled && self.zero_fill_wanted() {
            match self.segment.preallocate_ahead(ahead) {
                Ok(()) => {
                    zero_filled = ahead - self.segment_zero_filled;
                    self.segment_zero_filled = ahead;
                }
                // No room for the fill: the records extend the file meanwhile, and the fill is
                // asked for again after the next write.
                Err(e) if is_disk_full(&e) => {
                    tracing::debug!(error = %e, "log zero fill postponed: the disk is full");
                }
                Err(e) => {
                    let reason = format!("zero fill failed: {}: {e}", self.segment_path.display());
                    return Err(self.poison(reason));
                }
            }
        }
        {
            let mut stats = self.shared.stats.lock();
            stats.writes += 1;
            stats.bytes_written += self.buf.len;
            stats.zero_fill_bytes += zero_filled;
        }
        self.segment_records += self.buf_records;
        self.buf_records = 0;
        self.buf.clear();
        self.written = self.buf_last_lsn;
        self.shared
            .written_lsn
            .store(self.written, Ordering::Release);
        Ok(())
    }

    /// One `fdatasync` of the active segment; on success everything written is durable.
    fn fsync(&mut self) -> Result<(), Stop> {
        let target = self.written;
        let started = Instant::now();
        if let Err(e) = self.segment.sync_data() {
            let reason = format!("fsync failed: {}: {e}", self.segment_path.display());
            return Err(self.poison(reason));
        }
        self.last_fsync = started.elapsed();
        self.shared
            .stats
            .lock()
            .record_fsync(self.last_fsync.as_micros() as u64, target - self.durable);
        self.last_commit_records = target - self.durable;
        self.shared
            .last_commit_records
            .store(self.last_commit_records, Ordering::Relaxed);
        self.durable = target;
        self.unsynced_background_deadline = None;
        self.shared.queue.lock().taken_background_deadline = None;
        self.publish_durable();
        Ok(())
    }

    fn publish_durable(&self) {
        self.shared
            .durable_lsn
            .store(self.durable, Ordering::Release);
        self.shared.durable_waiters.wake_durable(self.durable);
        let _guard = self.shared.durable_lock.lock();
        self.shared.durable_cv.notify_all();
    }

    /// Closes the active segment (fsyncing it first if needed) and starts the one whose first
    /// record is `next_lsn`.
    fn rotate(&mut self, next_lsn: Lsn) -> Result<(), Stop> {
        if self.written > self.durable {
            // The old segment must be durable before the new one gets records, or a crash
            // could keep records of the new segment and lose earlier ones of the old.
            // Records of this batch after the rotation point are not covered by this fsync:
            // they keep the batch's background deadline (no later append may come to set one).
            let pending = self.unsynced_background_deadline;
            self.fsync()?;
            if pending.is_some() {
                self.unsynced_background_deadline = pending;
                self.shared.queue.lock().taken_background_deadline = pending;
            }
        }
        let dir = self.shared.opts.dir.clone();
        let segment_bytes = self.shared.opts.segment_bytes;
        let zero_fill = self.zero_fill_wanted();
        let created = loop {
            match create_segment(
                &*self.shared.storage,
                &dir,
                next_lsn,
                segment_bytes,
                zero_fill,
            ) {
                // A creation cut short is made again from the start (a crash meanwhile leaves
                // a torn creation, which recovery removes).
                Err(LogError::Io { op, path, source }) if is_disk_full(&source) => {
                    let reason =
                        format!("segment rotation failed: {op} {}: {source}", path.display());
                    self.wait_for_space(reason)?;
                }
                other => break other,
            }
        };
        self.space_again();
        match created {
            Ok(segment) => {
                {
                    let mut stats = self.shared.stats.lock();
                    stats.record_fsync(segment.fsync_time.as_micros() as u64, 0);
                    stats.dir_fsyncs += 1;
                    stats.writes += 1;
                    stats.bytes_written += format::SEGMENT_HEADER_LEN as u64;
                    stats.zero_fill_bytes +=
                        segment.zero_filled - format::SEGMENT_HEADER_LEN as u64;
                    stats.direct_io = segment.file.is_direct();
                }
                self.shared.segments.fetch_add(1, Ordering::AcqRel);
                self.segment = segment.file;
                self.segment_path = dir.join(format::segment_file_name(next_lsn));
                self.segment_records = 0;
                self.segment_zero_filled = segment.zero_filled;
                tracing::debug!(first_lsn = next_lsn, "started a new log segment");
                Ok(())
            }
            Err(LogError::Poisoned(reason)) => Err(self.poison(reason)),
            Err(e) => Err(self.poison(format!("segment rotation failed: {e}"))),
        }
    }

    /// The disk is full (`reason` says where): say so (once per stall), wait
    /// [`LogOptions::disk_full_retry`] and let the caller try again. If the log is shut down
    /// meanwhile, nothing more can be written: the log is poisoned instead.
    fn wait_for_space(&mut self, reason: String) -> Result<(), Stop> {
        *self.shared.stalled.lock() = Some(reason.clone());
        self.shared.is_stalled.store(true, Ordering::Release);
        if self.stalled_since.is_none() {
            self.stalled_since = Some(Instant::now());
            tracing::error!(
                reason = %reason,
                durable_lsn = self.durable,
                "the write-ahead log cannot write: the disk is full; durable writes are refused until it can (retrying)"
            );
            // Published above: waits for durability end with the reason instead of blocking
            // for as long as the disk stays full.
            self.shared.wake_waiters();
        }
        self.shared.stats.lock().disk_full_retries += 1;
        let until = Instant::now() + self.shared.opts.disk_full_retry;
        let mut queue = self.shared.queue.lock();
        while !queue.shutdown && Instant::now() < until {
            self.shared.writer_wakeup.wait_until(&mut queue, until);
        }
        if queue.shutdown {
            drop(queue);
            return Err(self.poison(format!(
                "shut down with the disk full: records after LSN {} were never written ({reason})",
                self.durable
            )));
        }
        Ok(())
    }

    /// A write succeeded: if the disk was full, it is not any more.
    fn space_again(&mut self) {
        if let Some(since) = self.stalled_since.take() {
            self.shared.is_stalled.store(false, Ordering::Release);
            *self.shared.stalled.lock() = None;
            tracing::warn!(
                stalled_ms = since.elapsed().as_millis() as u64,
                "the write-ahead log can write again; durable writes are accepted"
            );
        }
    }

    /// Poisons the log with `reason` and wakes every waiter.
    fn poison(&self, reason: String) -> Stop {
        tracing::error!(reason = %reason, durable_lsn = self.durable, "write-ahead log poisoned");
        let _ = self.shared.poison.set(reason.clone());
        self.shared.stats.lock().poisoned = Some(reason);
        self.shared.wake_waiters();
        Stop
    }
}
