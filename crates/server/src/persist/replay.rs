//! Start-up recovery: open the log and re-apply what it holds, the snapshot's items first, then
//! each record's commands, with the clock they first ran with. Records are replayed on every core
//! (one worker per partition of the shards, barriers for records that span partitions), and
//! snapshot items are loaded in parallel; what was found goes into a [`RecoveryReport`] for INFO.
//!
//! May import: `command` (the table and handlers that re-execute a record), `persist::record`,
//! `client` (the replaying connection), `state`. Must not import `persist::write` (a replayed
//! command is not logged again) or the front ends.

use super::record::{self, LoggedCommand, Record};
use crate::client::ClientState;
use crate::command::{table, Ctx};
use bytes::Bytes;
use gradus_log::{Durability, Log, LogError, Lsn, Recovered};
use gradus_store::Store;

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
                shared.functions.clear();
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
    // A keyspace that is not logged starts empty: a logged MOVE, COPY or SWAPDB replayed into
    // it (the key left a logged keyspace, or its degree changed since) leaves nothing there.
    let unlogged: Vec<_> = shared
        .store
        .keyspaces()
        .iter()
        .filter(|k| !shared.persist.db_logged(k.index()) && !k.is_empty())
        .map(|k| k.flush())
        .collect();
    if !unlogged.is_empty() {
        crate::command::server::dispose(unlogged);
    }
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
                    Ok(Record::Item { .. } | Record::Functions { .. }) => {
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
    // Commands that reach other keyspaces, or keys that neither their key positions nor a
    // `numkeys` name, run alone; so do scripts, whose declared keys (`numkeys`) need not be
    // all the keys they touch.
    let movable = spec.has(crate::command::flags::MOVABLE_KEYS)
        && (spec.numkeys_at == 0 || spec.has(crate::command::flags::NO_MANDATORY_KEYS));
    if spec.other_keyspaces.is_some() || movable {
        return None;
    }
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
    load_items_into(shared, items, false)
}

/// [`load_items`], for every keyspace when `all` (a replica loading its primary's snapshot,
/// which carries the `none` keyspaces too), else only for the logged ones.
pub fn load_items_into(
    shared: &crate::state::Shared,
    items: &[bytes::Bytes],
    all: bool,
) -> Result<(), String> {
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
                Record::Functions { db, codes } => {
                    crate::command::functions::load_snapshot_libraries(shared, db, &codes)?;
                    continue;
                }
                Record::Commands { .. } => return Err("command record inside a snapshot".into()),
            }
        } else {
            let (db, key) = record::item_key(item).map_err(|e| e.to_string())?;
            (db, key, None)
        };
        if !all && !shared.persist.db_logged(db) {
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

fn replay_client() -> ClientState {
    ClientState::internal()
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
    // config changed; FLUSHALL still applies (it may have been issued from such a database), and
    // so do MOVE, COPY and SWAPDB when a keyspace they name is logged (SWAPDB may be issued from
    // any keyspace; what they leave in unlogged keyspaces is dropped when recovery ends).
    let reaches_logged = || match spec.named_keyspaces(&shared.tenancy, c.db, &c.args) {
        crate::command::Named::Selected => false,
        crate::command::Named::Target { to, .. } => shared.persist.db_logged(to),
        crate::command::Named::Swap(a, b) => {
            shared.persist.db_logged(a) || shared.persist.db_logged(b)
        }
    };
    if !shared.persist.db_logged(c.db)
        && !spec.has(crate::command::flags::TENANT_WIDE)
        && !reaches_logged()
    {
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
