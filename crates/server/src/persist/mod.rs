//! Durability glue: which degree a write gets, appending it to the log, snapshots, and recovery.
//!
//! Every write goes through [`write::WriteTxn`], the one write path: the change is applied to
//! memory while the store gate is held (shared), its record is appended to the log *before* the
//! gate is released, so the log order is the order in which writes became visible; a `strict`
//! reply is then held back by the connection until the log's durable LSN covers the record (see
//! `connection`).
//! Keyspaces whose degree is `none` are never logged and never snapshotted, so neither a replay
//! nor a snapshot can bring back a stale value of theirs.

pub mod record;
pub mod write;

use crate::client::ClientState;
use crate::command::{table, Ctx};
use bytes::Bytes;
use gradus_log::{Durability, Log, LogError, Lsn, Recovered};
use gradus_store::Store;
use parking_lot::Mutex;
use record::{LoggedCommand, Record};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Persistence state shared by all connections.
pub struct Persistence {
    /// The log: unset when every database is `none` (nothing to make durable), and until
    /// recovery has opened it at start-up ([`recover`] replays into the state before it exists).
    pub log: std::sync::OnceLock<Log>,
    /// Whether any database is logged (so there is, or is about to be, a log).
    pub logged: bool,
    /// Default degree of each keyspace (by global index).
    pub degrees: Vec<Durability>,
    /// The tenant of each keyspace (by global index; orphans get `usize::MAX`): FLUSHALL's group.
    pub flush_groups: Vec<usize>,
    pub snapshot_in_progress: AtomicBool,
    /// Unix seconds of the last successful snapshot (or of start-up, as Redis' LASTSAVE does).
    pub last_save_unix: AtomicU64,
    /// Log bytes written when the last snapshot was armed.
    pub bytes_at_last_snapshot: AtomicU64,
    pub last_snapshot_status: Mutex<String>,
    /// Snapshots that failed since start (INFO `gradus_snapshot_failures`).
    pub snapshot_failures: AtomicU64,
    /// `BGSAVE`/`BGREWRITEAOF` asked for a snapshot that has not started yet (the snapshot task
    /// clears it when it starts one).
    pub snapshot_requested: AtomicBool,
    /// How long the last snapshot held the store gate exclusively to arm itself, and its longest
    /// shard copy, from asking for the shard's lock to releasing it (µs): the longest a command
    /// waited for it (see `gradus_store::ShardCopyTimes`).
    pub last_snapshot_arm_micros: AtomicU64,
    pub last_snapshot_max_copy_micros: AtomicU64,
    /// The longest the last snapshot held one shard's lock (µs): the copy itself, without the wait
    /// for the lock that the figure above includes.
    pub last_snapshot_max_hold_micros: AtomicU64,
    /// Snapshots written since start (INFO `rdb_saves`).
    pub snapshots_written: AtomicU64,
    /// When the running snapshot started (Unix ms; 0 when none runs), and how long the last one
    /// took, whether it succeeded or not (ms; `u64::MAX` before the first): INFO's
    /// `rdb_current_bgsave_time_sec` and `rdb_last_bgsave_time_sec`.
    pub snapshot_started_ms: AtomicU64,
    pub last_snapshot_millis: AtomicU64,
    /// What start-up recovery found, for INFO.
    pub recovery: Mutex<RecoveryReport>,
    /// The locked `dir/LOCK` file (see `server::lock_data_dir`); held until exit.
    pub dir_lock: Mutex<Option<std::fs::File>>,
    /// Connections currently waiting for an fsync before replying (see [`Persistence::wait_strict`]).
    pub strict_waiters: std::sync::atomic::AtomicUsize,
}

/// How long a lone strict waiter polls for its fsync before parking (a few fsyncs' worth).
const STRICT_POLL: std::time::Duration = std::time::Duration::from_micros(500);
/// A strict waiter polls only when the last fsync made at most this many records durable.
const LONE_COMMIT_RECORDS: u64 = 2;

/// Counts a connection among the strict waiters while it waits (also when its task is dropped).
struct StrictWaiter<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for StrictWaiter<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Start-up recovery figures.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    pub millis: u64,
    pub keys: usize,
    pub snapshot_items: usize,
    pub records_replayed: usize,
    pub torn_tail_bytes: u64,
    /// What `--repair` dropped, if anything.
    pub repaired: Option<String>,
}

impl Persistence {
    /// Whether database `db` is logged at all.
    pub fn db_logged(&self, db: usize) -> bool {
        self.logged && self.degrees.get(db).is_some_and(|d| d.is_logged())
    }

    /// Waits until `lsn` is durable before a strict reply (or a background one held for a late
    /// log thread). A lone strict writer — no other connection waiting now, and the last fsync
    /// covered at most [`LONE_COMMIT_RECORDS`] records — polls for its fsync, yielding to the
    /// other tasks between polls, for up to 500 µs before it parks: the fsync usually ends within
    /// that, and the reply then leaves without first waking a worker thread parked in
    /// `epoll_wait` (tens of microseconds on a VM, per write). With several writers one fsync
    /// releases them all and parking is cheaper: polling then only takes a core from the
    /// connections that are producing the next batch (at 8 connections it cost a fifth of the
    /// throughput).
    pub async fn wait_strict(&self, log: &Log, lsn: Lsn) -> Result<(), LogError> {
        if log.durable_lsn() >= lsn {
            return Ok(());
        }
        let others = self.strict_waiters.fetch_add(1, Ordering::Relaxed);
        let _waiter = StrictWaiter(&self.strict_waiters);
        if others == 0 && log.last_commit_records() <= LONE_COMMIT_RECORDS {
            let until = std::time::Instant::now() + STRICT_POLL;
            while std::time::Instant::now() < until {
                if log.durable_lsn() >= lsn {
                    return Ok(());
                }
                tokio::task::yield_now().await;
            }
        }
        log.wait_durable(lsn).await
    }
}

/// Open the log and apply what recovery finds as it finds it: the snapshot's items, then each
/// checked segment's records, re-executed with the clock they first ran with, while the next
/// segments are still being read (with the log written by direct I/O a restart reads it from the
/// disk; applying segment by segment overlaps that with the replay). Keys that expired while the
/// server was down are dropped at the end. Returns the log and what recovery found.
///
/// If recovery fails part-way (damage found further on), part of the log has been applied to
/// `shared`: the caller must not serve from it (the server stops).
pub fn recover(
    shared: &crate::state::Shared,
    options: gradus_log::LogOptions,
    storage: std::sync::Arc<dyn gradus_log::Storage>,
) -> Result<(Log, Recovered), LogError> {
    let opened = replay_stream(shared, |feed| {
        let mut sink = |batch: gradus_log::RecoveryBatch<'_>| match batch {
            gradus_log::RecoveryBatch::SnapshotItems(items) => load_snapshot(shared, &items),
            gradus_log::RecoveryBatch::DiscardSnapshot => {
                let keyspaces = shared.store.keyspaces();
                let keys: usize = keyspaces.iter().map(|k| k.len()).sum();
                tracing::warn!(
                    keys,
                    "dropping the keys loaded from a snapshot found damaged at its end"
                );
                // Freed off the start-up path, as FLUSHALL frees.
                let old: Vec<_> = keyspaces.iter().map(|k| k.flush()).collect();
                crate::command::server::dispose(old);
                Ok(())
            }
            gradus_log::RecoveryBatch::Records(records) => feed(records),
        };
        Log::open_streaming(options, storage, &mut sink)
    })
    .map_err(LogError::Apply)??;
    let now = gradus_store::now_ms();
    while shared.store.sweep_expired(now, usize::MAX) > 0 {}
    Ok(opened)
}

/// Snapshot items are distinct keys: load them on every core (most of the time is the kernel
/// zeroing fresh pages for the values, which parallelises well). The later parts of a value
/// split over several items stay in the chunk of its first part, so they are added in order.
fn load_snapshot(shared: &crate::state::Shared, items: &[Bytes]) -> Result<(), String> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = items.len().div_ceil(threads).max(1);
    let mut chunks = Vec::with_capacity(threads);
    let mut rest = items;
    while !rest.is_empty() {
        let mut end = chunk.min(rest.len());
        while end < rest.len() && record::is_later_part(&rest[end]) {
            end += 1;
        }
        let (this, next) = rest.split_at(end);
        chunks.push(this);
        rest = next;
    }
    std::thread::scope(|scope| {
        let workers: Vec<_> = chunks
            .into_iter()
            .map(|items| scope.spawn(move || load_items(shared, items)))
            .collect();
        workers.into_iter().try_for_each(|w| {
            w.join()
                .unwrap_or_else(|_| Err("snapshot loader panicked".into()))
        })
    })
}

/// Work for a replay worker: one single-key-partition command, or a request to report back once
/// everything sent before it has been applied.
enum ReplayJob {
    Apply(u64, LoggedCommand),
    Drain(std::sync::mpsc::Sender<()>),
}

/// A function that re-executes a batch of logged records (see [`replay_stream`]).
type Feed<'a> = dyn FnMut(&mut Vec<(Lsn, Bytes)>) -> Result<(), String> + 'a;

/// Re-execute logged records in log order, using every core: starts the replay workers, then
/// calls `produce` with a function to hand it batches of records, in LSN order, as they come.
/// When `produce` returns, waits for the workers to finish and returns what `produce` did.
///
/// A record that is one command whose keys all fall in one partition (a set of shards) goes to
/// that partition's worker; commands on the same key therefore run in log order, and commands on
/// keys of different partitions commute. Anything else — a MULTI/EXEC record, a multi-key command
/// spanning partitions, a key-less command such as FLUSHDB — is a barrier: the workers drain, the
/// record runs on this thread, and the workers resume.
fn replay_stream<R>(
    shared: &crate::state::Shared,
    produce: impl FnOnce(&mut Feed<'_>) -> R,
) -> Result<R, String> {
    use std::sync::mpsc::{channel, sync_channel};
    let partitions = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8);
    std::thread::scope(|scope| {
        let mut senders = Vec::with_capacity(partitions);
        let mut workers = Vec::with_capacity(partitions);
        for _ in 0..partitions {
            let (tx, rx) = sync_channel::<ReplayJob>(4096);
            senders.push(tx);
            workers.push(scope.spawn(move || -> Result<(), String> {
                let mut client = replay_client();
                let mut first_error = None;
                for job in rx {
                    match job {
                        ReplayJob::Apply(now_ms, c) => {
                            if let Err(e) = replay_command(shared, &mut client, now_ms, &c) {
                                first_error.get_or_insert(e);
                            }
                        }
                        ReplayJob::Drain(done) => {
                            let _ = done.send(());
                        }
                    }
                }
                first_error.map_or(Ok(()), Err)
            }));
        }
        let drain = |senders: &[std::sync::mpsc::SyncSender<ReplayJob>]| {
            let (done_tx, done_rx) = channel();
            for tx in senders {
                let _ = tx.send(ReplayJob::Drain(done_tx.clone()));
            }
            for _ in senders {
                let _ = done_rx.recv();
            }
        };
        let mut main_client = replay_client();
        let mut feed = |records: &mut Vec<(Lsn, Bytes)>| -> Result<(), String> {
            for (lsn, payload) in records.drain(..) {
                let (now_ms, mut commands) = match record::decode(&payload) {
                    Ok(Record::Commands { now_ms, commands }) => (now_ms, commands),
                    Ok(Record::Item { .. }) => {
                        return Err(format!("record {lsn}: snapshot item in the log"))
                    }
                    Err(e) => return Err(format!("record {lsn}: {e}")),
                };
                if commands.len() == 1 {
                    if let Some(p) = partition_of(shared, &commands[0], partitions) {
                        let c = commands.pop().expect("one command");
                        let _ = senders[p].send(ReplayJob::Apply(now_ms, c));
                        continue;
                    }
                }
                drain(&senders);
                for c in &commands {
                    replay_command(shared, &mut main_client, now_ms, c)
                        .map_err(|e| format!("record {lsn}: {e}"))?;
                }
            }
            Ok(())
        };
        let produced = produce(&mut feed);
        drop(senders);
        let mut result = Ok(());
        for w in workers {
            let r = w
                .join()
                .unwrap_or_else(|_| Err("replay worker panicked".into()));
            if result.is_ok() {
                result = r;
            }
        }
        result.map(|()| produced)
    })
}

/// The partition whose worker may replay `c` alone: Some when the command names keys and they
/// all live in shards of one partition.
fn partition_of(
    shared: &crate::state::Shared,
    c: &LoggedCommand,
    partitions: usize,
) -> Option<usize> {
    let spec = table().get(&c.args[0])?;
    let keyspace = shared.store.db(c.db)?;
    let mut found: Option<usize> = None;
    for i in spec.key_indexes(&c.args) {
        let key = c.args.get(i)?;
        let p = (c.db * gradus_store::SHARDS + keyspace.shard_index(key)) % partitions;
        if found.is_some_and(|f| f != p) {
            return None;
        }
        found = Some(p);
    }
    found
}

/// Insert snapshot items into the store (keys of databases that are `none` now are skipped).
/// A value split over several items is put together from its parts before it is inserted;
/// parts whose first item came in an earlier batch are added to the value loaded from it.
fn load_items(shared: &crate::state::Shared, items: &[bytes::Bytes]) -> Result<(), String> {
    let mut rest = items;
    while let Some(item) = rest.first() {
        // A first item (or, at the start of a batch, a later part) and the later parts after it.
        let first = usize::from(!record::is_later_part(item));
        let parts = rest[first..]
            .iter()
            .take_while(|i| record::is_later_part(i))
            .count();
        let (this, next) = rest.split_at(first + parts);
        rest = next;
        // A first item is decoded once, key and value; a later part only as far as its key.
        let (db, key, first_item) = if first == 1 {
            match record::decode(item).map_err(|e| e.to_string())? {
                Record::Item {
                    db,
                    key,
                    expires_at,
                    value,
                    meta,
                    ..
                } => (db, key, Some((expires_at, value, meta))),
                Record::Commands { .. } => return Err("command record inside a snapshot".into()),
            }
        } else {
            let (db, key) = record::item_key(item).map_err(|e| e.to_string())?;
            (db, key, None)
        };
        if !shared.persist.db_logged(db) {
            // The database is `none` now (the config changed): it starts empty.
            continue;
        }
        let ks = shared
            .store
            .db(db)
            .ok_or_else(|| format!("snapshot names database {db}, which does not exist"))?;
        let failed = |e: record::RecordError| format!("snapshot item for key {key:?}: {e}");
        match first_item {
            Some((expires_at, mut value, meta)) => {
                record::add_parts(&mut value, db, &key, &this[1..]).map_err(failed)?;
                ks.lock(&key)
                    .set_with_meta(&key, value, expires_at, meta, 0);
            }
            None => ks
                .lock(&key)
                .modify(&key, 0, |loaded| record::add_parts(loaded, db, &key, this))
                .unwrap_or(Err(record::RecordError(
                    "a later part of a value without its first part",
                )))
                .map_err(failed)?,
        }
    }
    Ok(())
}

/// Encoded snapshot items may wait for the snapshot writer up to this many bytes: the thread
/// walking the keyspaces encodes faster than the disk takes them, and a count bound alone let a
/// `SAVE` of 2.4 GB in 4 MiB values hold 1.3 GB of copies at once.
const SNAPSHOT_IN_FLIGHT_BYTES: usize = 64 << 20;

/// The bytes of encoded items between the walking thread and the writer, and whether the writer
/// has stopped taking them (then the walker must not wait).
#[derive(Default)]
struct InFlight {
    state: Mutex<(usize, bool)>,
    changed: parking_lot::Condvar,
}

impl InFlight {
    /// Waits until `len` more bytes fit (one item of any size fits when none is waiting);
    /// false once the writer is gone.
    fn take(&self, len: usize) -> bool {
        let mut state = self.state.lock();
        while state.0 > 0 && state.0 + len > SNAPSHOT_IN_FLIGHT_BYTES && !state.1 {
            self.changed.wait(&mut state);
        }
        state.0 += len;
        !state.1
    }
    fn give(&self, len: usize) {
        self.state.lock().0 -= len;
        self.changed.notify_one();
    }
    fn close(&self) {
        self.state.lock().1 = true;
        self.changed.notify_all();
    }
}

/// The writer's side of the item channel: returns each item's bytes to the budget, and closes
/// it when dropped (the snapshot ended, or failed and stopped reading).
struct Received<'a> {
    rx: std::sync::mpsc::Receiver<Bytes>,
    budget: &'a InFlight,
}

impl Iterator for Received<'_> {
    type Item = Bytes;
    fn next(&mut self) -> Option<Bytes> {
        let item = self.rx.recv().ok()?;
        self.budget.give(item.len());
        Some(item)
    }
}

impl Drop for Received<'_> {
    fn drop(&mut self) {
        self.budget.close();
    }
}

fn replay_client() -> ClientState {
    let unspecified = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
    let handle = std::sync::Arc::new(crate::client::ClientHandle::new(
        0,
        unspecified,
        unspecified,
    ));
    ClientState::new(handle, true)
}

/// Re-execute one logged command. Its reply is dropped: it already went to the client once.
fn replay_command(
    shared: &crate::state::Shared,
    client: &mut ClientState,
    now_ms: u64,
    c: &LoggedCommand,
) -> Result<(), String> {
    let spec = table()
        .get(&c.args[0])
        .ok_or_else(|| format!("unknown command {:?}", String::from_utf8_lossy(&c.args[0])))?;
    if c.db >= shared.store.databases() {
        return Err(format!("database {} does not exist", c.db));
    }
    // A database whose degree is `none` now starts empty, even if it was logged before the
    // config changed; FLUSHALL still applies (it may have been issued from such a database).
    if !shared.persist.db_logged(c.db) && !spec.has(crate::command::flags::TENANT_WIDE) {
        return Ok(());
    }
    client.db = c.db;
    let mut ctx = Ctx {
        shared,
        client,
        now_ms,
    };
    let _ = (spec.handler)(&mut ctx, &c.args);
    Ok(())
}

/// Take a snapshot now (SAVE, BGSAVE, the size/time trigger). Blocking: run it off the async
/// workers. Writers stall at most once, for one shard's copy (see `gradus_store::snapshot`).
pub fn take_snapshot(shared: &crate::state::Shared) -> Result<u64, String> {
    let p = &shared.persist;
    let Some(log) = p.log.get() else {
        return Err("no database is logged (every degree is none)".into());
    };
    if p.snapshot_in_progress.swap(true, Ordering::AcqRel) {
        return Err("Background save already in progress".into());
    }
    p.snapshot_started_ms
        .store(gradus_store::now_ms(), Ordering::Relaxed);
    let started = std::time::Instant::now();
    let result = (|| {
        let (lsn, sink, bytes_now) = {
            // No command is half-applied while the gate is held exclusively, and every applied
            // write has been appended: the state is exactly the log up to `lsn`.
            let _exclusive = shared.store.exclusive();
            (
                log.last_lsn(),
                shared.store.arm_snapshot(),
                log.stats().bytes_written,
            )
        };
        let arm_micros = started.elapsed().as_micros() as u64;
        let now = gradus_store::now_ms();
        let compress = shared.config.durability.snapshot_compression;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Bytes>(4096);
        let budget = InFlight::default();
        // Set by the drain thread after its last item, before its sender goes: the channel
        // closing without it (the thread panicked) must fail the snapshot, not end it early.
        let drained = AtomicBool::new(false);
        let (written, longest_copy) = std::thread::scope(|scope| {
            let (drained, budget) = (&drained, &budget);
            let drain = scope.spawn(move || {
                let longest = sink.drain(&shared.store, now, |db, key, item| {
                    if p.degrees.get(db).is_some_and(|d| d.is_logged()) {
                        // The receiver only goes away if the snapshot failed; stop quietly then.
                        record::encode_item(db, key, item, compress, |item| {
                            if budget.take(item.len()) {
                                let _ = tx.send(item);
                            }
                        });
                    }
                });
                drained.store(true, Ordering::Release);
                longest
            });
            let incomplete = std::iter::from_fn(|| {
                (!drained.load(Ordering::Acquire))
                    .then(|| Err("the thread walking the keyspaces stopped early".to_string()))
            })
            .take(1);
            let received = Received { rx, budget };
            let written = log.write_snapshot_from(lsn, &mut received.map(Ok).chain(incomplete));
            // A panic there has failed the snapshot (above); report it as this snapshot's error.
            (written, drain.join())
        });
        let written = written.map_err(|e| e.to_string())?;
        let longest_copy =
            longest_copy.map_err(|_| "the thread walking the keyspaces panicked".to_string())?;
        let copy_micros = longest_copy.with_wait.as_micros() as u64;
        let hold_micros = longest_copy.held.as_micros() as u64;
        p.bytes_at_last_snapshot.store(bytes_now, Ordering::Relaxed);
        p.last_snapshot_arm_micros
            .store(arm_micros, Ordering::Relaxed);
        p.last_snapshot_max_copy_micros
            .store(copy_micros, Ordering::Relaxed);
        p.last_snapshot_max_hold_micros
            .store(hold_micros, Ordering::Relaxed);
        tracing::info!(
            lsn,
            bytes = written,
            millis = started.elapsed().as_millis() as u64,
            arm_micros,
            longest_shard_copy_micros = copy_micros,
            longest_shard_hold_micros = hold_micros,
            "snapshot written"
        );
        Ok(written)
    })();
    p.last_snapshot_millis
        .store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
    p.snapshot_started_ms.store(0, Ordering::Relaxed);
    p.snapshot_in_progress.store(false, Ordering::Release);
    match &result {
        Ok(_) => {
            p.snapshots_written.fetch_add(1, Ordering::Relaxed);
            p.last_save_unix.store(unix_now(), Ordering::Relaxed);
            *p.last_snapshot_status.lock() = "ok".into();
        }
        Err(e) => {
            tracing::error!(error = %e, "snapshot failed");
            *p.last_snapshot_status.lock() = format!("err: {e}");
            p.snapshot_failures.fetch_add(1, Ordering::Relaxed);
        }
    }
    result
}

pub fn unix_now() -> u64 {
    gradus_store::now_ms() / 1000
}

/// Number of keys in logged databases (for the recovery report).
pub fn logged_keys(store: &Store, degrees: &[Durability]) -> usize {
    store
        .keyspaces()
        .iter()
        .enumerate()
        .filter(|(i, _)| degrees.get(*i).is_some_and(|d| d.is_logged()))
        .map(|(_, k)| k.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_snapshot_walk_waits_while_its_items_fill_the_budget() {
        let budget = InFlight::default();
        let half = SNAPSHOT_IN_FLIGHT_BYTES / 2 + 1;
        assert!(budget.take(half), "fits");
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            let budget = &budget;
            scope.spawn(move || done.send(budget.take(half)).unwrap());
            assert!(
                finished.recv_timeout(Duration::from_millis(200)).is_err(),
                "two halves and a byte do not fit: the walk waits"
            );
            budget.give(half);
            assert_eq!(finished.recv_timeout(Duration::from_secs(10)), Ok(true));
        });
        // One item larger than the whole budget still goes when nothing else waits.
        budget.give(half);
        assert!(budget.take(2 * SNAPSHOT_IN_FLIGHT_BYTES));
    }

    #[test]
    fn a_writer_that_stopped_reading_never_leaves_the_walk_waiting() {
        let budget = InFlight::default();
        assert!(budget.take(SNAPSHOT_IN_FLIGHT_BYTES));
        std::thread::scope(|scope| {
            let budget = &budget;
            let walker = scope.spawn(move || budget.take(1));
            std::thread::sleep(Duration::from_millis(50));
            let (_tx, rx) = std::sync::mpsc::sync_channel::<Bytes>(1);
            drop(Received { rx, budget }); // the writer gives up
            assert!(!walker.join().unwrap(), "told that nobody reads any more");
        });
        assert!(!budget.take(1));
    }
}
