//! Blocked clients: who waits on which keys (BLPOP, BLMOVE, BZPOPMIN …), and serving them, first
//! blocked first served, when a write makes a key ready.
//!
//! A blocking command that finds nothing to pop registers a [`Waiter`] under every key it names
//! and defers its reply (see `client::Deferred`): the connection task parks on the waiter, so a
//! blocked client costs no polling and no thread. Any write that touches a key while someone is
//! blocked notes the key on the connection (`ClientState::ready_keys`, collected by the write
//! path in `dispatch`); once the command has finished — after EXEC, or after a script, for the
//! writes inside them — [`serve`] runs: for each noted key, the first waiter still waiting has its
//! operation run *by the writer*, through the write path (so the pop is logged like any LPOP, at
//! the waiter's degree), and its reply handed over. So the element goes to the waiter that blocked
//! first, as in Redis, and no other client can take it in between. An operation that finds the key
//! empty or of another type leaves the waiter waiting, in its place.
//!
//! Lost wake-ups cannot happen: a waiter registers while it holds the shard locks of all its keys,
//! having found them empty, and a writer looks at the table only after its change left the shard;
//! so either the writer sees the waiter or the waiter sees the change.
//!
//! Lock order: shard locks → the table's lock (registration); the table's lock is never held while
//! a shard lock or the store gate is taken.
//!
//! May import: `client`, `state`, `dispatch` and the command table (to run the operations). Must
//! not import front ends.

use crate::client::{ClientHandle, ClientState};
use crate::command::{table, CommandSpec};
use crate::state::Shared;
use bytes::Bytes;
use gradus_proto::{Frame, ProtocolVersion};
use gradus_store::{Shard, StreamId, ValueKind};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// What a blocked client does with the first of its keys that becomes ready.
#[derive(Debug, Clone)]
pub enum Op {
    /// BLPOP / BRPOP: one element, replied `[key, element]`.
    Pop { left: bool },
    /// BZPOPMIN / BZPOPMAX: one member, replied `[key, member, score]`.
    ZPop { max: bool },
    /// BLMOVE / BRPOPLPUSH: the element moved to `dest`, replied alone.
    Move {
        dest: Bytes,
        from_left: bool,
        to_left: bool,
    },
    /// BLMPOP: up to `count` elements, replied `[key, [elements]]`.
    MPop { left: bool, count: usize },
    /// BZMPOP: up to `count` members, replied `[key, [[member, score] …]]`.
    ZMPop { max: bool, count: usize },
    /// XREAD / XREADGROUP … BLOCK: up to `count` entries (0: all) of the stream that has some,
    /// after the ID each stream was read from (None: XREADGROUP's `>`), or for a group
    /// (name, consumer, NOACK); replied as XREAD replies for that stream alone.
    XRead {
        count: u64,
        streams: Vec<(Bytes, Option<StreamId>)>,
        group: Option<(Bytes, Bytes, bool)>,
    },
}

impl Op {
    /// The non-blocking command that does the operation on `key`.
    pub fn command(&self, key: &Bytes) -> Vec<Bytes> {
        let word = |s: &'static str| Bytes::from_static(s.as_bytes());
        let end = |left: bool| word(if left { "LEFT" } else { "RIGHT" });
        match self {
            Op::Pop { left } => vec![word(if *left { "LPOP" } else { "RPOP" }), key.clone()],
            Op::ZPop { max } => vec![word(if *max { "ZPOPMAX" } else { "ZPOPMIN" }), key.clone()],
            Op::Move {
                dest,
                from_left,
                to_left,
            } => vec![
                word("LMOVE"),
                key.clone(),
                dest.clone(),
                end(*from_left),
                end(*to_left),
            ],
            Op::MPop { left, count } => vec![
                word("LMPOP"),
                word("1"),
                key.clone(),
                end(*left),
                word("COUNT"),
                Bytes::from(count.to_string()),
            ],
            Op::ZMPop { max, count } => vec![
                word(if *max { "ZPOPMAX" } else { "ZPOPMIN" }),
                key.clone(),
                Bytes::from(count.to_string()),
            ],
            Op::XRead {
                count,
                streams,
                group,
            } => {
                let after = streams
                    .iter()
                    .find(|(k, _)| k == key)
                    .and_then(|(_, after)| *after);
                let mut args = match group {
                    Some((name, consumer, _)) => vec![
                        word("XREADGROUP"),
                        word("GROUP"),
                        name.clone(),
                        consumer.clone(),
                    ],
                    None => vec![word("XREAD")],
                };
                if *count > 0 {
                    args.extend([word("COUNT"), Bytes::from(count.to_string())]);
                }
                if group.as_ref().is_some_and(|g| g.2) {
                    args.push(word("NOACK"));
                }
                args.extend([word("STREAMS"), key.clone()]);
                args.push(match after {
                    Some(id) => id.to_bytes(),
                    None => word(">"),
                });
                args
            }
        }
    }

    /// Whether `key` in `shard` has something for this waiter now (registration checks it
    /// under the shard's lock: see the module docs). A stream must have an entry past where
    /// the read started; any other type just has to exist.
    pub fn ready(&self, shard: &mut Shard, key: &[u8], now: u64) -> bool {
        let Op::XRead { streams, group, .. } = self else {
            return shard.contains_live(key, now);
        };
        let Some(s) = shard.peek(key, now).and_then(|e| e.value.as_stream()) else {
            return false;
        };
        let Some(last) = s.last_live() else {
            return false;
        };
        match group {
            Some((name, _, _)) => s.group(name).is_none_or(|g| last > g.last_id),
            None => streams
                .iter()
                .find(|(k, _)| k == key)
                .and_then(|(_, after)| *after)
                .is_some_and(|after| last > after),
        }
    }

    /// The protocol the command is run with: BZMPOP's pairs are nested in both protocols, which
    /// ZPOPMIN with a count does in RESP3 (its doubles are still written as bulk strings to a
    /// RESP2 client).
    pub fn run_as(&self, resp: ProtocolVersion) -> ProtocolVersion {
        match self {
            Op::ZMPop { .. } => ProtocolVersion::Resp3,
            _ => resp,
        }
    }

    /// The blocking command's reply for `key` from the command's, or None when it did nothing
    /// (the key is empty or of another type: the client stays blocked).
    pub fn reply(&self, key: &Bytes, done: Frame) -> Option<Frame> {
        match (self, done) {
            (_, Frame::Error(_) | Frame::Null | Frame::NullArray) => None,
            (Op::Pop { .. }, Frame::Bulk(v)) => {
                Some(Frame::Array(vec![Frame::Bulk(key.clone()), Frame::Bulk(v)]))
            }
            (Op::ZPop { .. }, Frame::Array(pair)) if pair.len() == 2 => {
                let mut out = vec![Frame::Bulk(key.clone())];
                out.extend(pair);
                Some(Frame::Array(out))
            }
            (Op::Move { .. }, Frame::Bulk(v)) => Some(Frame::Bulk(v)),
            (Op::MPop { .. }, reply @ Frame::Array(_)) => Some(reply),
            (Op::XRead { .. }, reply @ (Frame::Array(_) | Frame::Map(_))) => Some(reply),
            (Op::ZMPop { .. }, Frame::Array(pairs)) if !pairs.is_empty() => {
                Some(Frame::Array(vec![
                    Frame::Bulk(key.clone()),
                    Frame::Array(pairs),
                ]))
            }
            _ => None,
        }
    }

    /// Whether the waiter is answered when its key is deleted or changes type (XREADGROUP: its
    /// group went with the key; Redis 7.2 runs the command again, which answers NOGROUP).
    fn unblock_on_nokey(&self) -> bool {
        matches!(self, Op::XRead { group: Some(_), .. })
    }

    /// The type a key must hold to serve this waiter (Redis serves a blocked client only from a
    /// key of the type it blocked for: a key of another type leaves it blocked).
    fn wants(&self) -> ValueKind {
        match self {
            Op::Pop { .. } | Op::Move { .. } | Op::MPop { .. } => ValueKind::List,
            Op::ZPop { .. } | Op::ZMPop { .. } => ValueKind::ZSet,
            Op::XRead { .. } => ValueKind::Stream,
        }
    }

    /// The table row of the command that does the operation.
    fn spec(&self, args: &[Bytes]) -> Option<&'static CommandSpec> {
        table().get(&args[0])
    }
}

/// Where a waiter is.
#[derive(Debug)]
enum State {
    Waiting,
    /// A writer is running its operation.
    Serving,
    Served {
        reply: Frame,
        strict_lsn: u64,
        last_write_lsn: u64,
    },
    /// CLIENT UNBLOCK: reply as on a timeout, or with `-UNBLOCKED` when `error`.
    Unblocked {
        error: bool,
    },
    Gone,
}

/// One blocked client.
pub struct Waiter {
    pub client_id: u64,
    handle: Arc<ClientHandle>,
    db: usize,
    tenant: usize,
    perms: crate::tenancy::Perms,
    user: Arc<str>,
    resp: ProtocolVersion,
    durability: Option<gradus_log::Durability>,
    keys: Vec<Bytes>,
    op: Op,
    /// Whether it waits with a timeout (INFO `clients_in_timeout_table`).
    timed: bool,
    state: Mutex<State>,
    changed: Notify,
}

impl Waiter {
    /// A waiter for `client` on `keys` (in the connection's selected keyspace), `timed` when
    /// it waits with a timeout.
    pub fn new(client: &ClientState, keys: Vec<Bytes>, op: Op, timed: bool) -> Arc<Waiter> {
        Arc::new(Waiter {
            client_id: client.id,
            handle: client.handle.clone(),
            db: client.db,
            tenant: client.tenant,
            perms: client.perms,
            user: client.user.clone(),
            resp: client.resp,
            durability: client.durability,
            keys,
            op,
            timed,
            state: Mutex::new(State::Waiting),
            changed: Notify::new(),
        })
    }

    /// The connection state the operation runs with: the waiter's keyspace, rights and degree.
    fn client_state(&self) -> ClientState {
        let mut client = ClientState::new(self.handle.clone(), true);
        client.db = self.db;
        client.tenant = self.tenant;
        client.perms = self.perms;
        client.user = self.user.clone();
        client.resp = self.op.run_as(self.resp);
        client.durability = self.durability;
        client
    }
}

/// Every blocked client, by the keys it waits on.
#[derive(Default)]
pub struct BlockTable {
    inner: Mutex<Inner>,
    /// How many clients are blocked: writers note ready keys only while it is not zero.
    blocked: AtomicUsize,
    /// Clients whose command a CLIENT PAUSE holds back (see [`BlockTable::held_by_pause`]).
    paused: AtomicUsize,
}

/// A client held back by a pause, counted in `blocked_clients` while it lives.
pub struct HeldByPause<'a>(&'a AtomicUsize);

impl Drop for HeldByPause<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Default)]
struct Inner {
    /// (keyspace, key) → waiters in the order they blocked.
    queues: HashMap<(usize, Bytes), VecDeque<Arc<Waiter>>>,
    by_client: HashMap<u64, Arc<Waiter>>,
}

impl Inner {
    fn remove(&mut self, waiter: &Arc<Waiter>) -> bool {
        if self
            .by_client
            .get(&waiter.client_id)
            .is_none_or(|w| !Arc::ptr_eq(w, waiter))
        {
            return false;
        }
        self.by_client.remove(&waiter.client_id);
        for key in &waiter.keys {
            let slot = (waiter.db, key.clone());
            if let Some(queue) = self.queues.get_mut(&slot) {
                queue.retain(|w| !Arc::ptr_eq(w, waiter));
                if queue.is_empty() {
                    self.queues.remove(&slot);
                }
            }
        }
        true
    }
}

impl BlockTable {
    /// Whether any client is blocked (a write then notes the keys it touched).
    pub fn any(&self) -> bool {
        self.blocked.load(Ordering::Acquire) > 0
    }

    /// How many clients are blocked (INFO `blocked_clients`): on keys, and held back by a
    /// pause, which Redis 7.2 counts too (its pause.tcl waits for them there).
    pub fn count(&self) -> usize {
        self.blocked.load(Ordering::Relaxed) + self.paused.load(Ordering::Relaxed)
    }

    /// Count a client held back by a pause until the guard is dropped.
    pub fn held_by_pause(&self) -> HeldByPause<'_> {
        self.paused.fetch_add(1, Ordering::Relaxed);
        HeldByPause(&self.paused)
    }

    /// Block `waiter` on its keys. The caller holds the shard locks of those keys and found them
    /// all empty (see the module docs).
    pub fn register(&self, waiter: Arc<Waiter>) {
        let mut inner = self.inner.lock();
        // A connection blocks on one command at a time: an earlier waiter of its is stale.
        if let Some(old) = inner.by_client.get(&waiter.client_id).cloned() {
            if inner.remove(&old) {
                self.blocked.fetch_sub(1, Ordering::AcqRel);
            }
        }
        for key in &waiter.keys {
            inner
                .queues
                .entry((waiter.db, key.clone()))
                .or_default()
                .push_back(waiter.clone());
        }
        inner.by_client.insert(waiter.client_id, waiter);
        self.blocked.fetch_add(1, Ordering::AcqRel);
    }

    fn unregister(&self, waiter: &Arc<Waiter>) {
        if self.inner.lock().remove(waiter) {
            self.blocked.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// The first waiter on `key` that is still waiting and not among `passed`, now marked as
    /// being served.
    fn take_first(&self, db: usize, key: &Bytes, passed: &[Arc<Waiter>]) -> Option<Arc<Waiter>> {
        let inner = self.inner.lock();
        let queue = inner.queues.get(&(db, key.clone()))?;
        queue.iter().find_map(|w| {
            if passed.iter().any(|p| Arc::ptr_eq(p, w)) {
                return None;
            }
            let mut state = w.state.lock();
            matches!(*state, State::Waiting).then(|| {
                *state = State::Serving;
                w.clone()
            })
        })
    }

    /// INFO clients' `total_blocking_keys` (keys some client waits on),
    /// `total_blocking_keys_on_nokey` (those where one waits for what a deleted key answers
    /// too: a blocked XREADGROUP) and `clients_in_timeout_table` (clients waiting with a
    /// timeout), as Redis 7.2 counts them.
    pub fn key_counts(&self) -> (usize, usize, usize) {
        if !self.any() {
            return (0, 0, 0);
        }
        let inner = self.inner.lock();
        let on_nokey = inner
            .queues
            .values()
            .filter(|queue| queue.iter().any(|w| w.op.unblock_on_nokey()))
            .count();
        let timed = inner.by_client.values().filter(|w| w.timed).count();
        (inner.queues.len(), on_nokey, timed)
    }

    /// Every key clients wait on in keyspaces `dbs`: after FLUSHDB, FLUSHALL or SWAPDB each is
    /// looked at again as a written key is (Redis 7.2's `signalFlushedDb` and
    /// `scanDatabaseForDeletedKeys`), so a blocked XREADGROUP whose stream went is answered
    /// NOGROUP instead of waiting for a group that no longer exists; a pop stays blocked.
    pub fn keys_waited_in(&self, dbs: &[usize]) -> Vec<(usize, Bytes)> {
        if !self.any() {
            return Vec::new();
        }
        let inner = self.inner.lock();
        inner
            .queues
            .keys()
            .filter(|(db, _)| dbs.contains(db))
            .cloned()
            .collect()
    }

    /// CLIENT UNBLOCK: wake client `id` if it is blocked here (as on a timeout, or with an error).
    pub fn unblock(&self, id: u64, error: bool) -> bool {
        let waiter = self.inner.lock().by_client.get(&id).cloned();
        let Some(waiter) = waiter else {
            return false;
        };
        let mut state = waiter.state.lock();
        if !matches!(*state, State::Waiting) {
            return false;
        }
        *state = State::Unblocked { error };
        drop(state);
        waiter.changed.notify_one();
        true
    }
}

/// Serve the clients blocked on `ready` keys (and on the keys their own operations make ready),
/// each key's first waiter first. Runs after the command whose writes touched them, outside any
/// lock, on the writer's thread.
pub fn serve(shared: &Shared, ready: Vec<(usize, Bytes)>) {
    let mut queue: VecDeque<(usize, Bytes)> = ready.into();
    let mut steps = 0usize;
    while let Some((db, key)) = queue.pop_front() {
        // Waiters this key could not serve stay in their places, and the ones behind them are
        // still looked at: a client blocked on the key for another type (BLPOP on what is now
        // a stream) must not hold back a blocked XREADGROUP that a deleted key answers, as in
        // Redis 7.2, which looks at every client blocked on a ready key.
        let mut passed: Vec<Arc<Waiter>> = Vec::new();
        while let Some(waiter) = shared.blocked.take_first(db, &key, &passed) {
            steps += 1;
            let args = waiter.op.command(&key);
            let Some(spec) = waiter.op.spec(&args) else {
                *waiter.state.lock() = State::Waiting;
                passed.push(waiter);
                continue;
            };
            let mut client = waiter.client_state();
            let now = gradus_store::now_ms();
            let holds = |shared: &Shared| {
                shared
                    .store
                    .db(waiter.db)
                    .is_some_and(|ks| ks.lock(&key).live_kind(&key, now) == Some(waiter.op.wants()))
            };
            if !holds(shared) && !waiter.op.unblock_on_nokey() {
                // Emptied, or of another type: it stays in its place.
                *waiter.state.lock() = State::Waiting;
                passed.push(waiter);
                continue;
            }
            let done = run_op(shared, &mut client, spec, args, now, false);
            let reply = match done {
                // The key was of the right type, so the error is the command's own (BLMOVE
                // into a key of another type: WRONGTYPE), and Redis' re-run of the blocked
                // command replies with it and unblocks the client. Regression:
                // `test_a_blocked_move_into_a_key_of_another_type_is_answered_wrongtype`.
                Frame::Error(_) if holds(shared) || waiter.op.unblock_on_nokey() => Some(done),
                done => waiter.op.reply(&key, done),
            };
            let Some(reply) = reply else {
                // Nothing to take after all: it stays in its place.
                *waiter.state.lock() = State::Waiting;
                passed.push(waiter);
                continue;
            };
            shared.blocked.unregister(&waiter);
            *waiter.state.lock() = State::Served {
                reply,
                strict_lsn: client.strict_lsn,
                last_write_lsn: client.last_write_lsn,
            };
            waiter.changed.notify_one();
            queue.extend(client.ready_keys.drain(..));
            if steps > 1_000_000 {
                // A bound on one writer's work; anything left is served by the next write.
                return;
            }
        }
    }
}

/// Runs a waiter's operation: a write through the write path, a read (XREAD) as a read, under
/// the store gate's shared hold unless the caller holds the gate already (`gate_held`: a
/// blocking command's first try, inside its own command).
pub fn run_op(
    shared: &Shared,
    client: &mut ClientState,
    spec: &'static CommandSpec,
    args: Vec<Bytes>,
    now: u64,
    gate_held: bool,
) -> Frame {
    if spec.runs_as_write() {
        return crate::dispatch::run_write(shared, client, spec, args, now);
    }
    if gate_held {
        return crate::dispatch::run(shared, client, spec, &args, now);
    }
    let _gate = shared.store.shared(client.id);
    crate::dispatch::run(shared, client, spec, &args, now)
}

/// The blocked client's side: wait until served, unblocked, the deadline (None: forever), the
/// connection being killed, or the server shutting down. Returns the reply; a served reply's LSN
/// is noted on the connection so a strict one leaves only once durable.
///
/// The clean-up that takes the waiter out of the table is made here, before the future is first
/// polled, so a connection that goes away before that leaves no waiter behind (regression:
/// `test_a_client_that_hangs_up_before_it_blocks_is_never_left_blocked`).
pub fn wait(
    shared: Arc<Shared>,
    client: &mut ClientState,
    waiter: Arc<Waiter>,
    deadline: Option<tokio::time::Instant>,
) -> impl std::future::Future<Output = Frame> + Send + '_ {
    let cleanup = Cleanup {
        shared: shared.clone(),
        waiter: waiter.clone(),
    };
    wait_until_served(shared, client, waiter, deadline, cleanup)
}

async fn wait_until_served(
    shared: Arc<Shared>,
    client: &mut ClientState,
    waiter: Arc<Waiter>,
    deadline: Option<tokio::time::Instant>,
    _cleanup: Cleanup,
) -> Frame {
    let handle = client.handle.clone();
    let mut shutdown = shared.shutdown.subscribe();
    let timeout = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(timeout);
    let mut gave_up = false;
    loop {
        let changed = waiter.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        {
            let mut state = waiter.state.lock();
            match std::mem::replace(&mut *state, State::Gone) {
                State::Served {
                    reply,
                    strict_lsn,
                    last_write_lsn,
                } => {
                    client.strict_lsn = client.strict_lsn.max(strict_lsn);
                    client.last_write_lsn = client.last_write_lsn.max(last_write_lsn);
                    return reply;
                }
                State::Unblocked { error: true } => {
                    return Frame::Error(
                        "UNBLOCKED client unblocked via CLIENT UNBLOCK".to_string(),
                    )
                }
                State::Unblocked { error: false } => return timed_out(&waiter.op),
                State::Waiting if gave_up => return timed_out(&waiter.op),
                // Being served: wait for the outcome, even past the deadline.
                other => *state = other,
            }
        }
        tokio::select! {
            _ = &mut changed => {}
            _ = &mut timeout, if !gave_up => gave_up = true,
            _ = handle.killed(), if !gave_up => gave_up = true,
            _ = shutdown.wait_for(|down| *down), if !gave_up => gave_up = true,
        }
    }
}

/// The reply of a blocking command that timed out: a null array for the pops, a null bulk for
/// the moves (Redis' forms).
fn timed_out(op: &Op) -> Frame {
    match op {
        Op::Move { .. } => Frame::Null,
        _ => Frame::NullArray,
    }
}

/// Takes the waiter out of the table however its wait ends (the reply, the deadline, or the
/// connection going away while it waits).
struct Cleanup {
    shared: Arc<Shared>,
    waiter: Arc<Waiter>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        {
            let mut state = self.waiter.state.lock();
            if matches!(*state, State::Waiting) {
                *state = State::Gone;
            }
        }
        self.shared.blocked.unregister(&self.waiter);
    }
}
