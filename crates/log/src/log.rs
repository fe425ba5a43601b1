//! [`Log`]: the handle the server holds — append, wait for durability, sync, snapshot, close.
//!
//! `append` only queues (it never blocks on I/O) and returns the record's LSN; the writer
//! thread (the private `writer` module) does all segment I/O. Waiting is separate from
//! appending so the server can release `lazy`/`background` replies at once and park only
//! `strict` ones on [`Log::wait_durable`] — an `async fn` that is cheap for thousands of
//! concurrent waiters (a waker each, kept in LSN order so a commit wakes only the ones it
//! covers; no lock is held across its `.await`: see the private `waiters` module).
//!
//! Snapshots are written by the caller's thread (not the writer): temp file → fsync → rename
//! → directory fsync, and only then are the segments and snapshots it makes unnecessary
//! removed, so a crash at any point leaves either the old snapshot with its segments or the
//! new one.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

use crate::error::LogError;
use crate::format::{self, encoded_record_len, FileKind, SnapshotEncoder, MAX_RECORD_LEN};
use crate::options::LogOptions;
use crate::recovery::{self, Recovered, RecoverySink};
use crate::stats::LogStats;
use crate::storage::Storage;
use crate::writer::{self, Queue, Shared, Writer};
use crate::{Durability, Lsn};

/// Snapshot bytes are handed to the OS in chunks of about this size.
const SNAPSHOT_CHUNK: usize = 1 << 20;
/// A snapshot being written is fdatasynced every this many bytes (as Redis'
/// `rdb-save-incremental-fsync` does every 32 MB), so its dirty pages go to the disk a few
/// megabytes at a time instead of all at the final fsync: a gigabyte written back at once keeps
/// the log's own fsyncs waiting behind it for 100+ ms, and `background` writes past their bound.
const SNAPSHOT_SYNC_EVERY: usize = 8 << 20;

/// What [`Log::append_bounded`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The record's LSN.
    pub lsn: Lsn,
    /// The writer is behind a `background` fsync deadline: hold the reply until `lsn` is durable.
    pub late: bool,
}

/// A handle to an open write-ahead log. Cloning is cheap (an `Arc`); every clone talks to the
/// same writer thread. The writer stops (after a final flush and fsync) on [`Log::close`] or
/// when the last clone is dropped.
#[derive(Clone)]
pub struct Log {
    inner: Arc<LogInner>,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("dir", &self.inner.shared.opts.dir)
            .field("last_lsn", &self.last_lsn())
            .field("durable_lsn", &self.durable_lsn())
            .finish_non_exhaustive()
    }
}

/// Owned by the `Log` clones (not by the writer thread, which holds only `Shared`), so that
/// dropping the last clone stops the writer.
struct LogInner {
    shared: Arc<Shared>,
    /// Taken by whoever stops the writer first (`close` or `Drop`).
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl LogInner {
    /// Asks the writer to drain, fsync and exit, and waits for it.
    fn stop_writer(&self) {
        self.shared.queue.lock().shutdown = true;
        self.shared.writer_wakeup.notify_one();
        if let Some(handle) = self.writer.lock().take() {
            if handle.join().is_err() {
                tracing::error!("the log writer thread panicked");
            }
        }
    }
}

impl Drop for LogInner {
    fn drop(&mut self) {
        self.stop_writer();
    }
}

impl Log {
    /// Opens the log in `opts.dir` (creating the directory if needed), recovers what is there
    /// (see [`crate::recovery`]), starts a fresh segment after the last recovered LSN, and
    /// starts the writer thread. Returns the log and what recovery found.
    pub fn open(opts: LogOptions, storage: Arc<dyn Storage>) -> Result<(Log, Recovered), LogError> {
        Self::open_inner(opts, storage, None)
    }

    /// [`Log::open`], handing the snapshot's items and then each checked segment's records to
    /// `sink` as recovery finds them instead of collecting them in [`Recovered`]: the caller can
    /// apply a segment while the next ones are still being read from the disk. If recovery
    /// fails after some batches (damage found further on), the caller has applied part of a log
    /// that does not open: it must discard what it applied.
    pub fn open_streaming(
        opts: LogOptions,
        storage: Arc<dyn Storage>,
        sink: &mut RecoverySink<'_>,
    ) -> Result<(Log, Recovered), LogError> {
        Self::open_inner(opts, storage, Some(sink))
    }

    fn open_inner(
        opts: LogOptions,
        storage: Arc<dyn Storage>,
        sink: Option<&mut RecoverySink<'_>>,
    ) -> Result<(Log, Recovered), LogError> {
        let dir = opts.dir.clone();
        storage
            .create_dir_all(&dir)
            .map_err(LogError::io_at("create_dir_all", &dir))?;
        // The log directory's own entry must be durable too, or a crash right after the first
        // strict record could lose the whole directory. (Further ancestors are the
        // deployment's business: they normally exist before the server starts.)
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => std::path::PathBuf::from("."),
        };
        if let Err(e) = storage.sync_dir(&parent) {
            tracing::warn!(dir = %parent.display(), error = %e, "could not fsync the log directory's parent");
        }
        let outcome = recovery::recover(&*storage, &dir, opts.repair, sink)?;
        let recovered = outcome.recovered;
        let last_lsn = recovered.last_lsn;
        // No commit has been waited for yet: zero fill starts with the first one (see
        // `LogOptions::zero_fill_window`), unless it is always on.
        let segment = writer::create_segment(
            &*storage,
            &dir,
            last_lsn + 1,
            opts.segment_bytes,
            opts.zero_fill_window == Duration::MAX,
        )?;

        let mut stats = LogStats::default();
        stats.record_fsync(segment.fsync_time.as_micros() as u64, 0);
        stats.dir_fsyncs = 1;
        stats.writes = 1;
        stats.bytes_written = format::SEGMENT_HEADER_LEN as u64;
        stats.zero_fill_bytes = segment.zero_filled - format::SEGMENT_HEADER_LEN as u64;
        stats.direct_io = segment.file.is_direct();

        let shared = Arc::new(Shared {
            opts,
            storage,
            queue: Mutex::new(Queue {
                records: Vec::new(),
                first_lsn: last_lsn + 1,
                next_lsn: last_lsn + 1,
                bytes: 0,
                sync_target: 0,
                oldest: None,
                background_deadline: None,
                taken_background_deadline: None,
                shutdown: false,
            }),
            writer_wakeup: Condvar::new(),
            queue_space: Condvar::new(),
            last_lsn: AtomicU64::new(last_lsn),
            written_lsn: AtomicU64::new(last_lsn),
            durable_lsn: AtomicU64::new(last_lsn),
            last_commit_records: AtomicU64::new(0),
            durable_waiters: Default::default(),
            durable_lock: Mutex::new(()),
            durable_cv: Condvar::new(),
            poison: OnceLock::new(),
            stalled: Mutex::new(None),
            is_stalled: AtomicBool::new(false),
            writer_exited: AtomicBool::new(false),
            stats: Mutex::new(stats),
            segments: AtomicU64::new(outcome.segments + 1),
            snapshot_lsn: AtomicU64::new(recovered.snapshot_lsn),
            late_background: AtomicU64::new(0),
            snapshot_lock: Mutex::new(()),
        });
        let writer = Writer::new(Arc::clone(&shared), segment, last_lsn + 1, last_lsn);
        let handle = std::thread::Builder::new()
            .name("gradus-log-writer".to_string())
            .spawn(move || writer.run())
            .map_err(LogError::io_at("spawn writer thread", &dir))?;
        tracing::info!(
            dir = %dir.display(),
            snapshot_lsn = recovered.snapshot_lsn,
            records = recovered.records_recovered,
            torn_tail_bytes = recovered.torn_tail_bytes,
            last_lsn,
            "write-ahead log opened"
        );
        let log = Log {
            inner: Arc::new(LogInner {
                shared,
                writer: Mutex::new(Some(handle)),
            }),
        };
        Ok((log, recovered))
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// Queues one record and returns its LSN at once; never blocks on I/O.
    ///
    /// `degree` decides how soon the writer makes it durable (see [`Durability`]); it must not
    /// be `None` ([`LogError::NotLogged`]). Fails with [`LogError::Poisoned`] once an fsync
    /// failed, [`LogError::Closed`] after `close`, [`LogError::TooLarge`] over 512 MiB.
    pub fn append(&self, payload: Bytes, degree: Durability) -> Result<Lsn, LogError> {
        self.append_bounded(payload, degree)
            .map(|appended| appended.lsn)
    }

    /// [`Log::append`], also saying whether the writer is *late*: a `background` record appended
    /// while an earlier background record is unsynced for more than twice
    /// `background_fsync_ms` (the disk or the writer fell behind, e.g. under a write burst or a
    /// slow fsync). A caller that acknowledges such a
    /// record at once would let the loss window grow without bound, so it should hold the
    /// reply until [`Log::wait_durable`] covers the LSN, as for `strict`: back-pressure in time,
    /// next to the queue's back-pressure in bytes. Never late for other degrees.
    pub fn append_bounded(&self, payload: Bytes, degree: Durability) -> Result<Appended, LogError> {
        if degree == Durability::None {
            return Err(LogError::NotLogged);
        }
        if payload.len() > MAX_RECORD_LEN {
            return Err(LogError::TooLarge {
                len: payload.len(),
                max: MAX_RECORD_LEN,
            });
        }
        let shared = self.shared();
        let opts = &shared.opts;
        let record_len = encoded_record_len(payload.len());
        let mut queue = shared.queue.lock();
        // Back-pressure: the writer is behind by `max_queue_bytes`; wait for it to take the queue.
        while queue.bytes >= opts.max_queue_bytes
            && !queue.shutdown
            && shared.poisoned_error().is_none()
            && !shared.writer_exited.load(Ordering::Acquire)
        {
            shared.writer_wakeup.notify_one();
            shared.queue_space.wait(&mut queue);
        }
        if let Some(err) = shared.poisoned_error() {
            return Err(err);
        }
        if queue.shutdown {
            return Err(LogError::Closed);
        }
        let lsn = queue.next_lsn;
        queue.next_lsn += 1;
        queue.records.push(payload);
        queue.bytes += record_len;
        let now = Instant::now();
        let mut late = false;
        // Wake the writer only when its plan changes; otherwise it is already due to wake.
        let mut wake = false;
        if queue.oldest.is_none() {
            queue.oldest = Some(now);
            wake = true;
        }
        match degree {
            Durability::Strict | Durability::Replicated => {
                queue.sync_target = lsn;
                wake = true;
            }
            Durability::Background => {
                // Late = an unsynced background record is older than twice the bound: one
                // bound of grace absorbs the writer thread being scheduled a few milliseconds
                // late on a saturated machine (holding replies for that would only add latency
                // spikes); past it the disk is really behind.
                let grace = Duration::from_millis(opts.background_fsync_ms);
                late = [queue.background_deadline, queue.taken_background_deadline]
                    .into_iter()
                    .flatten()
                    .any(|deadline| deadline + grace < now);
                if queue.background_deadline.is_none() {
                    queue.background_deadline =
                        Some(now + Duration::from_millis(opts.background_fsync_ms));
                    wake = true;
                }
            }
            _ => {}
        }
        if queue.bytes >= opts.buffer_bytes {
            wake = true;
        }
        shared.last_lsn.store(lsn, Ordering::Release);
        drop(queue);
        if wake {
            shared.writer_wakeup.notify_one();
        }
        if late {
            shared.late_background.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Appended { lsn, late })
    }

    fn check_waitable(&self, lsn: Lsn) -> Result<(), LogError> {
        let last = self.last_lsn();
        if lsn > last {
            return Err(LogError::LsnOutOfRange { lsn, last });
        }
        Ok(())
    }

    /// Resolves once `lsn` is covered by an fsync; [`LogError::Poisoned`] if the log is
    /// poisoned first. Does not itself cause an fsync: strict appends and `sync_now` do.
    /// Cancel-safe; holds no lock across its `.await`.
    pub async fn wait_durable(&self, lsn: Lsn) -> Result<(), LogError> {
        let shared = self.shared();
        if lsn <= shared.durable_lsn.load(Ordering::Acquire) {
            return Ok(());
        }
        self.check_waitable(lsn)?;
        crate::waiters::WaitDurable::new(shared, lsn).await
    }

    /// Blocks until `lsn` is durable (`Ok(true)`), or `timeout` passes (`Ok(false)`), or the
    /// log is poisoned or stalled (`Err`). For threads outside the async runtime.
    pub fn wait_durable_blocking(&self, lsn: Lsn, timeout: Duration) -> Result<bool, LogError> {
        let shared = self.shared();
        if lsn <= shared.durable_lsn.load(Ordering::Acquire) {
            return Ok(true);
        }
        self.check_waitable(lsn)?;
        let deadline = Instant::now().checked_add(timeout);
        let mut guard = shared.durable_lock.lock();
        loop {
            if lsn <= shared.durable_lsn.load(Ordering::Acquire) {
                return Ok(true);
            }
            if let Some(err) = shared.wait_error() {
                return Err(err);
            }
            if shared.writer_exited.load(Ordering::Acquire) {
                return Err(LogError::Closed);
            }
            match deadline {
                Some(deadline) => {
                    if shared
                        .durable_cv
                        .wait_until(&mut guard, deadline)
                        .timed_out()
                    {
                        return Ok(lsn <= shared.durable_lsn.load(Ordering::Acquire));
                    }
                }
                None => shared.durable_cv.wait(&mut guard),
            }
        }
    }

    /// Forces everything appended so far to be written and fsynced (`WAITAOF`, shutdown);
    /// blocks until it is, and returns the durable LSN.
    pub fn sync_now(&self) -> Result<Lsn, LogError> {
        let shared = self.shared();
        let target = {
            let mut queue = shared.queue.lock();
            if let Some(err) = shared.wait_error() {
                return Err(err);
            }
            if queue.shutdown {
                return Err(LogError::Closed);
            }
            let target = queue.next_lsn - 1;
            if target <= shared.durable_lsn.load(Ordering::Acquire) {
                return Ok(shared.durable_lsn.load(Ordering::Acquire));
            }
            queue.sync_target = queue.sync_target.max(target);
            target
        };
        shared.writer_wakeup.notify_one();
        while !self.wait_durable_blocking(target, Duration::from_secs(3600))? {}
        Ok(self.durable_lsn())
    }

    /// LSN of the last appended record (0 if none, ever).
    pub fn last_lsn(&self) -> Lsn {
        self.shared().last_lsn.load(Ordering::Acquire)
    }

    /// LSN of the last record handed to the OS.
    pub fn written_lsn(&self) -> Lsn {
        self.shared().written_lsn.load(Ordering::Acquire)
    }

    /// LSN of the last record covered by an fsync.
    pub fn durable_lsn(&self) -> Lsn {
        self.shared().durable_lsn.load(Ordering::Acquire)
    }

    /// How many records the last fsync made durable: about how many writers wait on one
    /// fsync together (1 for a lone strict writer; 0 before the first fsync).
    pub fn last_commit_records(&self) -> u64 {
        self.shared().last_commit_records.load(Ordering::Relaxed)
    }

    /// Why the log is poisoned, if it is.
    pub fn poisoned(&self) -> Option<String> {
        self.shared().poisoned()
    }

    /// Why the writer cannot write just now (the disk is full; it retries), if it cannot.
    /// Records appended meanwhile are kept and written once it can.
    pub fn stalled(&self) -> Option<String> {
        self.shared().stalled()
    }

    /// The options the log was opened with.
    pub fn options(&self) -> &LogOptions {
        &self.shared().opts
    }

    /// A copy of the counters (see [`LogStats`]).
    pub fn stats(&self) -> LogStats {
        let shared = self.shared();
        let mut stats = shared.stats.lock().clone();
        stats.last_lsn = self.last_lsn();
        stats.written_lsn = self.written_lsn();
        stats.durable_lsn = self.durable_lsn();
        stats.segments = shared.segments.load(Ordering::Acquire);
        stats.snapshot_lsn = shared.snapshot_lsn.load(Ordering::Acquire);
        stats.poisoned = shared.poisoned();
        stats.late_background = shared.late_background.load(Ordering::Relaxed);
        stats
    }

    /// The longest segment fsync since the last call, in microseconds (0 if none), and start
    /// a new window: the latency monitor samples it once a second.
    pub fn take_fsync_peak(&self) -> u64 {
        std::mem::take(&mut self.shared().stats.lock().fsync_peak_micros)
    }

    /// Writes a snapshot of the state as of `lsn` from `items` (opaque payloads; the caller
    /// guarantees the state includes every record `<= lsn`), then removes the segments whose
    /// records are all `<= lsn` and every older snapshot. Returns the snapshot's size.
    ///
    /// Order: `snap-<lsn>.snap.tmp` → fsync → rename to `snap-<lsn>.snap` → directory fsync →
    /// only then deletions → directory fsync. Blocking; runs on the caller's thread while
    /// appends continue. A failure leaves the previous snapshot and every segment in place
    /// (it does not poison the log: no record's durability depended on it).
    pub fn write_snapshot(
        &self,
        lsn: Lsn,
        items: &mut dyn Iterator<Item = Bytes>,
    ) -> Result<u64, LogError> {
        self.write_snapshot_from(lsn, &mut items.map(Ok))
    }

    /// [`Log::write_snapshot`] from a source that can fail part-way (items produced on another
    /// thread, say): an `Err` item abandons the snapshot before anything is renamed or removed
    /// ([`LogError::SnapshotSource`]), where a source that merely stopped early would have
    /// made a snapshot missing its last items look complete.
    pub fn write_snapshot_from(
        &self,
        lsn: Lsn,
        items: &mut dyn Iterator<Item = Result<Bytes, String>>,
    ) -> Result<u64, LogError> {
        let shared = self.shared();
        if let Some(err) = shared.poisoned_error() {
            return Err(err);
        }
        if shared.queue.lock().shutdown {
            return Err(LogError::Closed);
        }
        self.check_waitable(lsn)?;
        let _one_snapshot_at_a_time = shared.snapshot_lock.lock();
        let dir = &shared.opts.dir;
        let storage = &*shared.storage;
        let temp = dir.join(format::snapshot_temp_file_name(lsn));
        let path = dir.join(format::snapshot_file_name(lsn));

        let written = write_snapshot_file(storage, &temp, lsn, items);
        let size = match written {
            Ok(size) => size,
            Err(err) => {
                let _ = storage.remove(&temp);
                return Err(err);
            }
        };
        storage
            .rename(&temp, &path)
            .map_err(LogError::io_at("rename", &temp))?;
        storage
            .sync_dir(dir)
            .map_err(LogError::io_at("sync_dir", dir))?;
        shared.stats.lock().dir_fsyncs += 1;
        shared.snapshot_lsn.fetch_max(lsn, Ordering::AcqRel);
        tracing::info!(lsn, bytes = size, "snapshot written");
        self.remove_files_covered_by(lsn)?;
        Ok(size)
    }

    /// Removes segments whose records are all `<= lsn`, and snapshots older than `lsn`.
    /// The newest segment is never removed (the writer may be appending to it).
    fn remove_files_covered_by(&self, lsn: Lsn) -> Result<(), LogError> {
        let shared = self.shared();
        let dir = &shared.opts.dir;
        let storage = &*shared.storage;
        let names = storage.list(dir).map_err(LogError::io_at("list", dir))?;
        let mut segments = Vec::new();
        let mut doomed = Vec::new();
        for name in names {
            match format::parse_file_name(&name) {
                Some(FileKind::Segment(first)) => segments.push(first),
                Some(FileKind::Snapshot(s)) | Some(FileKind::SnapshotTemp(s)) if s < lsn => {
                    doomed.push(name)
                }
                _ => {}
            }
        }
        segments.sort_unstable();
        let mut removed_segments = 0;
        // Segment i holds LSNs [first_i, first_{i+1}); all <= lsn iff first_{i+1} <= lsn + 1.
        for pair in segments.windows(2) {
            if pair[1] <= lsn.saturating_add(1) {
                doomed.push(format::segment_file_name(pair[0]));
                removed_segments += 1;
            }
        }
        if doomed.is_empty() {
            return Ok(());
        }
        for name in &doomed {
            let path = dir.join(name);
            storage
                .remove(&path)
                .map_err(LogError::io_at("remove", &path))?;
        }
        shared
            .segments
            .fetch_sub(removed_segments, Ordering::AcqRel);
        storage
            .sync_dir(dir)
            .map_err(LogError::io_at("sync_dir", dir))?;
        shared.stats.lock().dir_fsyncs += 1;
        tracing::debug!(
            lsn,
            files = doomed.len(),
            "removed files covered by a snapshot"
        );
        Ok(())
    }

    /// Flushes and fsyncs everything appended, stops the writer thread, and reports whether
    /// the log ended healthy. Every clone of this handle is closed too.
    pub fn close(self) -> Result<(), LogError> {
        self.inner.stop_writer();
        match self.shared().poisoned_error() {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }
}

/// Writes a complete, fsynced snapshot file at `temp`; returns its size.
fn write_snapshot_file(
    storage: &dyn Storage,
    temp: &Path,
    lsn: Lsn,
    items: &mut dyn Iterator<Item = Result<Bytes, String>>,
) -> Result<u64, LogError> {
    let mut file = storage
        .create(temp)
        .map_err(LogError::io_at("create", temp))?;
    let mut buf = Vec::with_capacity(SNAPSHOT_CHUNK + 4096);
    let mut encoder = SnapshotEncoder::start(lsn, &mut buf);
    let mut unsynced = 0;
    for item in items {
        let item = item.map_err(LogError::SnapshotSource)?;
        if item.len() > MAX_RECORD_LEN {
            return Err(LogError::TooLarge {
                len: item.len(),
                max: MAX_RECORD_LEN,
            });
        }
        encoder.item(&item, &mut buf);
        if buf.len() >= SNAPSHOT_CHUNK {
            file.append(&buf).map_err(LogError::io_at("write", temp))?;
            unsynced += buf.len();
            buf.clear();
            if unsynced >= SNAPSHOT_SYNC_EVERY {
                file.sync_data().map_err(LogError::io_at("fsync", temp))?;
                unsynced = 0;
            }
        }
    }
    let size = encoder.finish(&mut buf);
    file.append(&buf).map_err(LogError::io_at("write", temp))?;
    file.sync_data().map_err(LogError::io_at("fsync", temp))?;
    Ok(size)
}
