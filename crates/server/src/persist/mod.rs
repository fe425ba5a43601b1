//! Durability glue: which degree a write gets, appending it to the log, snapshots, and recovery.
//!
//! Every write goes through [`write::WriteTxn`], the one write path: the change is applied to
//! memory while the store gate is held (shared), its record is appended to the log *before* the
//! gate is released, so the log order is the order in which writes became visible; a `strict`
//! reply is then held back by the connection until the log's durable LSN covers the record (see
//! `connection`).
//! Keyspaces whose degree is `none` are never logged and never snapshotted, so neither a replay
//! nor a snapshot can bring back a stale value of theirs.
//!
//! The module list: this file holds the [`Persistence`] state all connections share, the lookup
//! of a keyspace's degree, and the wait for a `strict` write's fsync; [`write`](mod@write) is
//! the write path, [`record`] the encoding of log records and snapshot items, [`replay`]
//! start-up recovery, [`snapshot`] taking a snapshot, [`layout`] the data directory's lock and
//! `LAYOUT` file.
//!
//! May import (each submodule says which of these it needs): `state`, `client`, `quota`,
//! `command` (replay only), `tenancy` and `config` (layout only), `error`, `gradus-log`,
//! `gradus-store`. Must not import the front ends (`connection`, `dispatch`, `memcache`): they
//! call this.

pub mod layout;
pub mod record;
pub mod replay;
pub mod snapshot;
pub mod write;

use gradus_log::{Durability, Log, LogError, Lsn};
use parking_lot::Mutex;
use replay::RecoveryReport;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Persistence state shared by all connections.
pub struct Persistence {
    /// The log: unset when every database is `none` (nothing to make durable), and until
    /// recovery has opened it at start-up ([`replay::recover`] replays into the state before it
    /// exists).
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
    /// Size of the last snapshot written (at start-up: of the snapshot files found), the base of
    /// `snapshot-log-percentage`.
    pub last_snapshot_bytes: AtomicU64,
    pub last_snapshot_status: Mutex<String>,
    /// Snapshots that failed since start (INFO `gradus_snapshot_failures`).
    pub snapshot_failures: AtomicU64,
    /// `BGSAVE`/`BGREWRITEAOF` asked for a snapshot that has not started yet (cleared when a
    /// log snapshot starts, in `snapshot::take_snapshot`).
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
    /// The locked `dir/LOCK` file (see [`layout::lock_data_dir`]); held until exit.
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

impl Persistence {
    /// A snapshot runs, or BGSAVE/BGREWRITEAOF asked for one the snapshot task has not started
    /// yet: what INFO's `rdb_bgsave_in_progress` says. Redis forks before BGSAVE answers, so a
    /// client that polls the flag after the reply never sees 0 before the save.
    pub fn snapshot_pending(&self) -> bool {
        self.snapshot_in_progress.load(Ordering::Acquire)
            || self.snapshot_requested.load(Ordering::Acquire)
    }

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

pub fn unix_now() -> u64 {
    gradus_store::now_ms() / 1000
}
