//! The write path: every mutation of the keyspaces goes through one [`WriteTxn`].
//!
//! A write transaction is begun by a connection for a [`Scope`] (a keyspace, every keyspace of a
//! tenant, or the evictions that make room in a tenant) and owns, in this order:
//! 1. the memory quota: room is made (an `lru` keyspace evicts) or the write is refused with OOM;
//! 2. the degree: the scope's default, or the connection's override (`CLIENT DURABILITY`);
//! 3. the writable check: a poisoned or stalled log refuses logged writes (`MISCONF`);
//! 4. the record-size check, before anything is applied (an append cannot be undone);
//! 5. the store gate (shared) and, when logged, the write-order lock, so a snapshot sees a write
//!    applied *and* appended or neither, and the log order is the order writes reached memory;
//! 6. the append of one record holding everything the transaction logged, and the LSN the
//!    connection must see durable before it replies (`ClientState::strict_lsn`).
//!
//! Transactions nest: EXEC and scripts open one under the exclusive gate, and every write they
//! run (a queued SET, a SESSION.CLOSE that logs its effects, a script's `redis.call`) *joins* it:
//! its degree is checked on its own, and what it logs goes into the enclosing record in the order
//! it ran, so a replay applies the whole transaction or none of it, in that order. The open
//! record lives on the connection ([`ClientState::record`]): a command that logs its own effects
//! hands them over with [`log_effect`], wherever it runs.
//!
//! Replication: once a backlog exists (`repl::Repl::is_active`), every write also builds its
//! record when its keyspace is `none`, each command tagged with whether it is logged here: the
//! local log gets only the logged commands (a MULTI mixing `none` and logged keyspaces logs only
//! the latter), the replication stream all of them, fed under the same write-order lock (or
//! exclusive gate) as the append, so the stream's order is the order writes reached memory.
//! With no backlog the `none` path encodes nothing, as before. A replica refuses writes from its
//! clients (`READONLY`, when `replica-read-only`); a primary short of good replicas refuses them
//! when `min-replicas-to-write` asks (`NOREPLICAS`).
//!
//! One error type, [`WriteError`], has one text per failure in Redis' form (`CmdError`) and in
//! memcached's ([`WriteError::memcached_line`]).
//!
//! May import: `state`, `client`, `quota`, `persist::record`, `error`. Must not import command
//! modules or the front ends: they call this.

use crate::client::ClientState;
use crate::error::CmdError;
use crate::persist::record::{self, LoggedCommand, RecordRoom};
use crate::state::Shared;
use bytes::Bytes;
use gradus_log::format::MAX_RECORD_LEN;
use gradus_log::{Durability, LogError, Lsn};
use gradus_store::gate::{ExclusiveHold, SharedHold};
use gradus_store::HeldShards;

/// What a write transaction may change; it decides the degree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// One keyspace (global index).
    Keyspace(usize),
    /// Every keyspace of the tenant that owns this keyspace (FLUSHALL): logged at the strongest
    /// degree among them.
    Tenant(usize),
    /// Evictions that make room in this tenant (None: in the server, for `maxmemory`): logged at
    /// the strongest degree of its evicting keyspaces, whatever the connection asked for.
    Evictions(Option<usize>),
    /// Keys read in keyspace `from` and written into keyspace `to` of the same tenant (MOVE,
    /// COPY … DB): logged at the stronger degree of the two. Refused when `from` is never logged
    /// and `to` is: a replay would not find in `from` what the write took from it.
    Across { from: usize, to: usize },
    /// Two keyspaces of one tenant that exchange their contents (SWAPDB): refused unless both
    /// have the same degree and eviction policy, so each key keeps the durability and eviction
    /// it had (a swap between a logged keyspace and a `none` one could not be replayed).
    Swap(usize, usize),
}

/// Why a write was refused (or, for [`WriteError::NotLogged`], applied but not logged).
#[derive(Debug)]
pub enum WriteError {
    /// The connection asked for a logged degree in a keyspace that is never logged.
    UnloggedKeyspace { degree: Durability, db: usize },
    /// An fsync failed: the log refuses durable writes until a restart.
    Poisoned(String),
    /// The disk is full: the log refuses durable writes until there is room again.
    Stalled(String),
    /// The record would be over the log's limit; nothing was applied.
    RecordTooLarge { len: usize },
    /// Over a `memory-limit` that nothing can be evicted from (`what`: the keyspace or tenant).
    Oom { what: String },
    /// The server is over `maxmemory` and nothing may be evicted.
    MaxMemory,
    /// Applied in memory, but the append failed.
    NotLogged(LogError),
    /// MOVE or COPY from a keyspace that is never logged into a logged one (SELECT numbers).
    FromUnlogged { from: usize, to: usize },
    /// SWAPDB between keyspaces of different degrees or eviction policies (SELECT numbers, and
    /// each one's `degree/eviction`).
    SwapMismatch {
        a: (usize, String),
        b: (usize, String),
    },
    /// A write from a client of a read-only replica.
    ReadOnlyReplica,
    /// Fewer good replicas than `min-replicas-to-write`.
    NoReplicas,
}

impl WriteError {
    /// The reply line of the memcached front end (`SERVER_ERROR …`, memcached's own text for OOM).
    pub fn memcached_line(&self) -> String {
        match self {
            WriteError::Oom { .. } | WriteError::MaxMemory => {
                "SERVER_ERROR out of memory storing object".into()
            }
            other => {
                let text = CmdError::from(other).to_string();
                let text = text.strip_prefix("ERR ").unwrap_or(&text);
                format!("SERVER_ERROR {text}")
            }
        }
    }
}

impl From<&WriteError> for CmdError {
    fn from(e: &WriteError) -> CmdError {
        match e {
            WriteError::UnloggedKeyspace { degree, db } => CmdError::err(format!(
                "durability '{degree}' requested but database {db} is not logged (its degree is none)"
            )),
            WriteError::Poisoned(reason) => CmdError::Other(format!(
                "MISCONF the write-ahead log is poisoned ({reason}); durable writes are refused until restart"
            )),
            WriteError::Stalled(reason) => CmdError::Other(format!(
                "MISCONF the write-ahead log cannot write ({reason}); durable writes are refused until there is room on the disk again"
            )),
            WriteError::RecordTooLarge { len } => CmdError::err(format!(
                "the write's log record would be {len} bytes, over the {MAX_RECORD_LEN}-byte limit; not applied"
            )),
            WriteError::Oom { what } => CmdError::Other(format!(
                "OOM command not allowed when used memory > 'memory-limit' of {what}"
            )),
            WriteError::MaxMemory => {
                CmdError::Other("OOM command not allowed when used memory > 'maxmemory'.".into())
            }
            WriteError::NotLogged(e) => CmdError::Other(format!(
                "MISCONF write applied in memory but not logged: {e}"
            )),
            WriteError::FromUnlogged { from, to } => CmdError::err(format!(
                "keys cannot go from database {from}, which is never logged (durability none), into database {to}, which is logged"
            )),
            WriteError::ReadOnlyReplica => {
                CmdError::Other("READONLY You can't write against a read only replica.".into())
            }
            WriteError::NoReplicas => {
                CmdError::Other("NOREPLICAS Not enough good replicas to write.".into())
            }
            WriteError::SwapMismatch { a, b } => CmdError::err(format!(
                "SWAPDB needs two databases of the same durability and eviction policy (database {}: {}, database {}: {})",
                a.0, a.1, b.0, b.1
            )),
        }
    }
}

impl std::fmt::Display for WriteError {
    /// The Redis form's text (as `CmdError` renders it).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        CmdError::from(self).fmt(f)
    }
}

impl std::error::Error for WriteError {}

impl From<WriteError> for CmdError {
    fn from(e: WriteError) -> CmdError {
        CmdError::from(&e)
    }
}

/// The record a write transaction is building, kept on the connection while it is open.
#[derive(Debug)]
pub struct OpenRecord {
    now_ms: u64,
    commands: Vec<LoggedCommand>,
    /// The strongest degree among what was logged so far.
    degree: Durability,
    /// The degree of the write running now: its effects are logged only when it is logged.
    current: Durability,
    /// What the record has left under the log's limit.
    room: RecordRoom,
    /// A lone command encoded before the write-order lock was taken (see
    /// [`WriteTxn::apply_command`]); appended as it is.
    encoded: Option<Bytes>,
    /// Opened by EXEC or a script, which run other writes.
    runs_others: bool,
    /// Streamed to replicas (a backlog exists): commands are kept whether logged or not.
    replicate: bool,
    /// For each of `commands`: whether it is logged here (else it is only streamed).
    logged: Vec<bool>,
}

impl OpenRecord {
    fn new(now_ms: u64, current: Durability, replicate: bool) -> Self {
        Self {
            now_ms,
            commands: Vec::new(),
            degree: Durability::None,
            current,
            room: RecordRoom::whole(),
            encoded: None,
            runs_others: false,
            replicate,
            logged: Vec::new(),
        }
    }

    /// Whether what the write running now does is recorded (logged, or streamed).
    fn records_current(&self) -> bool {
        self.current.is_logged() || self.replicate
    }

    /// Whether EXEC or a script opened it (the writes running now run inside one).
    pub fn runs_others(&self) -> bool {
        self.runs_others
    }

    fn push(&mut self, db: usize, args: Vec<Bytes>) {
        self.push_tagged(db, args, self.current.is_logged());
    }

    fn push_tagged(&mut self, db: usize, args: Vec<Bytes>, logged: bool) {
        self.room.take(&args);
        self.commands.push(LoggedCommand { db, args });
        self.logged.push(logged);
        if logged {
            self.degree = self.degree.max(self.current);
        }
    }
}

/// Whether writes by `client` are streamed now: a backlog exists, and this is a primary (on a
/// replica the replica task streams its primary's records as they came; a write of its own
/// clients, when `replica-read-only` is no, stays local, as in Redis).
fn replicates(shared: &Shared, client: &ClientState) -> bool {
    shared.repl.is_active() && !client.from_primary && !shared.repl.is_replica()
}

/// For a key-locked transaction running on this thread (`WriteTxn::begin_keyed`): also hold
/// the shards of `keys` in keyspace `db` until it ends. As when the hold was taken, a shard is
/// taken only once every write applied to it is in the log (or stream): a lone write in a logged
/// or streamed keyspace marks the shards it locks until it has appended
/// (`gradus_store::UnloggedMarks`), so this needs no write-order lock (a lone write holds that
/// while it waits for a shard, possibly one of this transaction's). Each shard is waited for at
/// most `patience` (false then; a shard taken before that stays held to the end).
pub fn hold_more(
    shared: &Shared,
    db: usize,
    keys: &[&[u8]],
    patience: std::time::Duration,
) -> bool {
    let Some(keyspace) = shared.store.db(db) else {
        return false;
    };
    keys.iter().all(|key| keyspace.try_hold_more(key, patience))
}

/// Refuse a write from a client of a read-only replica, or on a primary short of good replicas.
pub fn check_role(shared: &Shared, client: &ClientState) -> Result<(), WriteError> {
    if client.from_primary {
        return Ok(());
    }
    let settings = &shared.repl.settings;
    if shared.repl.is_active() && shared.repl.is_replica() {
        if settings
            .read_only
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Err(WriteError::ReadOnlyReplica);
        }
        return Ok(());
    }
    let min = settings
        .min_replicas_to_write
        .load(std::sync::atomic::Ordering::Relaxed);
    if min > 0 {
        let lag = settings
            .min_replicas_max_lag
            .load(std::sync::atomic::Ordering::Relaxed);
        if (shared.repl.good_replicas(lag) as u64) < min {
            return Err(WriteError::NoReplicas);
        }
    }
    Ok(())
}

/// Log `args` as an effect of the write running now on `client`, in keyspace `db`, if that write
/// is logged (a command flagged `SELF_LOGGED` calls this for what it changed; outside a write
/// transaction, as in a replay, it does nothing).
pub fn log_effect(client: &mut ClientState, db: usize, args: Vec<Bytes>) {
    if let Some(record) = client.record.as_mut().filter(|r| r.records_current()) {
        record.push(db, args);
    }
}

/// Stream `args` (in keyspace `db`) to replicas without logging it here: an effect in a keyspace
/// that is never logged (an eviction from a `none` cache) while the write running now may be.
pub fn stream_effect(client: &mut ClientState, db: usize, args: Vec<Bytes>) {
    if let Some(record) = client.record.as_mut().filter(|r| r.replicate) {
        record.push_tagged(db, args, false);
    }
}

/// Whether the write running now on `client` is recorded, logged or streamed (so a caller can
/// skip building effects).
pub fn effects_logged(client: &ClientState) -> bool {
    client.record.as_ref().is_some_and(|r| r.records_current())
}

enum Gate<'s> {
    /// Joined a transaction further out, which holds the gate.
    Joined,
    /// Not taken yet ([`WriteTxn::apply`] and [`WriteTxn::apply_command`] take it).
    Pending,
    Shared(#[allow(dead_code)] SharedHold<'s>),
    Exclusive(#[allow(dead_code)] ExclusiveHold<'s>),
    /// A script that declared its keys: the gate shared, and its keys' shards held.
    Keyed(
        #[allow(dead_code)] SharedHold<'s>,
        #[allow(dead_code)] HeldShards<'s>,
    ),
}

/// One write transaction (see the module docs). It borrows the connection for its whole life;
/// dropping it without [`WriteTxn::commit`] (a write refused before it applied anything, a
/// transaction whose WATCH failed) logs nothing and closes its record.
pub struct WriteTxn<'s, 'c> {
    shared: &'s Shared,
    client: &'c mut ClientState,
    degree: Durability,
    gate: Gate<'s>,
    order: Option<Ordered<'s>>,
}

/// What a lone write whose record is ordered holds from before it applies until it has
/// appended: the write-order lock, and the marks on the shards it locks (so a key-locked
/// transaction taking one of them waits for this record first, without the lock).
struct Ordered<'s> {
    _marks: gradus_store::UnloggedMarks,
    _lock: parking_lot::MutexGuard<'s, ()>,
}

impl<'s> Ordered<'s> {
    fn take(shared: &'s Shared) -> Self {
        let lock = shared.write_order.lock();
        Ordered {
            _marks: gradus_store::UnloggedMarks::begin(),
            _lock: lock,
        }
    }
}

impl<'s, 'c> WriteTxn<'s, 'c> {
    /// Begin a write by `client` in `scope`. `grows`: the write may take memory, so room is made
    /// first under a `memory-limit`. Inside an open transaction the write joins it (no quota, no
    /// locks: the enclosing one holds the exclusive gate). No lock is held yet: the caller applies
    /// through [`WriteTxn::apply`] or [`WriteTxn::apply_command`].
    pub fn begin(
        shared: &'s Shared,
        client: &'c mut ClientState,
        scope: Scope,
        now_ms: u64,
        grows: bool,
    ) -> Result<Self, WriteError> {
        if client.record.is_some() {
            if !matches!(scope, Scope::Evictions(_)) {
                check_role(shared, client)?;
            }
            let degree = writable_degree(shared, client, scope)?;
            if let Some(record) = client.record.as_mut() {
                record.current = degree;
            }
            return Ok(Self {
                shared,
                client,
                degree,
                gate: Gate::Joined,
                order: None,
            });
        }
        if !matches!(scope, Scope::Evictions(_)) {
            check_role(shared, client)?;
        }
        // A replica keeps what its primary sends: it never evicts on its own (as Redis'
        // replica-ignore-maxmemory).
        if grows && !client.from_primary {
            match scope {
                Scope::Keyspace(db) => crate::quota::make_room(shared, client, db, now_ms)?,
                Scope::Across { to, .. } => crate::quota::make_room(shared, client, to, now_ms)?,
                // A tenant-wide write that may grow memory (FUNCTION LOAD, RESTORE): no
                // keyspace of its own to make room in, but the server's maxmemory holds for
                // it as for any command flagged denyoom (Redis' `processCommand`).
                Scope::Tenant(_) => crate::quota::make_room_in_server(shared, client, now_ms)?,
                _ => {}
            }
        }
        let degree = writable_degree(shared, client, scope)?;
        client.record = Some(OpenRecord::new(now_ms, degree, replicates(shared, client)));
        Ok(Self {
            shared,
            client,
            degree,
            gate: Gate::Pending,
            order: None,
        })
    }

    /// Begin a transaction that runs other writes (EXEC, a script) under the exclusive gate:
    /// nothing else runs until it ends, and the writes it runs join its record. `grows`: room is
    /// made first in the selected keyspace. Inside an open transaction (a script in EXEC) it joins.
    pub fn begin_exclusive(
        shared: &'s Shared,
        client: &'c mut ClientState,
        now_ms: u64,
        grows: bool,
    ) -> Result<Self, WriteError> {
        if client.record.is_some() {
            return Ok(Self {
                shared,
                client,
                degree: Durability::None,
                gate: Gate::Joined,
                order: None,
            });
        }
        if grows && !client.from_primary {
            let db = client.db;
            crate::quota::make_room(shared, client, db, now_ms)?;
        }
        // The exclusive hold keeps every other writer out (each holds the gate shared while
        // it holds the write-order lock): no write-order lock is needed under it. Whether it is
        // streamed is decided under it (a replica's full sync arms its snapshot under it).
        let gate = shared.store.exclusive();
        client.record = Some(OpenRecord {
            runs_others: true,
            ..OpenRecord::new(now_ms, Durability::None, replicates(shared, client))
        });
        Ok(Self {
            shared,
            client,
            degree: Durability::None,
            gate: Gate::Exclusive(gate),
            order: None,
        })
    }

    /// Begin a transaction that runs other writes on declared keys only (a script or function
    /// that declared them): instead of the exclusive gate it holds the gate shared and the
    /// shards of `keys` in keyspace `db` until it ends, so scripts on other keys, and every
    /// other command, run beside it. The caller must let it run only commands on those keys (in
    /// `db`). Inside an open transaction (a script in EXEC) it joins.
    ///
    /// Log order: a lone write in a logged or streamed keyspace marks each shard it locks from
    /// before it applies until it has appended (`gradus_store::UnloggedMarks`, taken with the
    /// write-order lock). A shard is held only once its marks are cleared, so every write
    /// applied to it before has been appended already; a write to a held key waits for the
    /// shard, which goes only after this transaction's record has been appended (`commit`).
    /// So writes to the same key reach the log in the order they reached memory, and writes to
    /// other keys commute. Neither the hold nor the commit takes the write-order lock: a lone
    /// write may hold it while it waits for one of these shards. The shards are taken with
    /// `try_lock` only; when one is busy (locked, or marked), everything is let go, the shard is
    /// waited for, and the whole is tried again, so nothing waits while it holds a shard (no
    /// deadlock with other holds or multi-key commands).
    pub fn begin_keyed(
        shared: &'s Shared,
        client: &'c mut ClientState,
        now_ms: u64,
        grows: bool,
        db: usize,
        keys: &[Bytes],
    ) -> Result<Self, WriteError> {
        if client.record.is_some() {
            return Self::begin_exclusive(shared, client, now_ms, grows);
        }
        if grows && !client.from_primary {
            crate::quota::make_room(shared, client, db, now_ms)?;
        }
        let keyspace = shared.store.db(db).expect("the selected keyspace exists");
        let gate = shared.store.shared(client.id);
        // Decided under the gate, as for a lone write (see `lock`).
        let replicate = replicates(shared, client);
        let held = loop {
            match keyspace.try_hold(keys.iter().map(|k| k.as_ref())) {
                Ok(held) => break held,
                Err(busy) => keyspace.wait_for_shard(busy),
            }
        };
        client.record = Some(OpenRecord {
            runs_others: true,
            ..OpenRecord::new(now_ms, Durability::None, replicate)
        });
        Ok(Self {
            shared,
            client,
            degree: Durability::None,
            gate: Gate::Keyed(gate, held),
            order: None,
        })
    }

    /// Whether this transaction holds its keys' shards rather than the exclusive gate.
    pub fn is_keyed(&self) -> bool {
        matches!(self.gate, Gate::Keyed(..))
    }

    /// The connection, for the writes a transaction runs (they begin transactions that join it).
    pub fn client(&mut self) -> &mut ClientState {
        self.client
    }

    /// Whether this write is logged (for a transaction that runs others: whether its own effects
    /// are; theirs are decided one by one).
    pub fn is_logged(&self) -> bool {
        self.degree.is_logged()
    }

    /// Take the gate (shared) and, for a logged or streamed write, the write-order lock.
    /// Whether the write is streamed is decided here, under the gate: a replica's full sync
    /// creates the backlog and arms its snapshot under the exclusive gate, so a write is either
    /// in that snapshot or streamed after it (decided before the gate, a write begun just before
    /// the first replica connected would be in neither).
    fn lock(&mut self) {
        if matches!(self.gate, Gate::Pending) {
            self.gate = Gate::Shared(self.shared.store.shared(self.client.id));
            let replicate = replicates(self.shared, self.client);
            if let Some(record) = self.client.record.as_mut() {
                record.replicate = replicate;
            }
            self.order = (self.degree.is_logged() || replicate).then(|| Ordered::take(self.shared));
        }
    }

    /// Apply a write whose effects `apply` logs itself, through [`log_effect`].
    pub fn apply<R>(&mut self, apply: impl FnOnce(&mut ClientState) -> R) -> R {
        self.lock();
        apply(self.client)
    }

    /// Apply a command that is logged as itself (`args`, in keyspace `db`) when `apply` succeeds
    /// (`ok` says whether it did). The record-size check comes first; a lone write is encoded
    /// before the write-order lock is taken, to keep that critical section short. `args` are
    /// taken only when the command joins an open record (EXEC, a script); a lone write leaves
    /// them to the caller (the slow log's, without a copy).
    pub fn apply_command<R>(
        &mut self,
        db: usize,
        args: &mut Vec<Bytes>,
        apply: impl FnOnce(&mut ClientState, &[Bytes]) -> R,
        ok: impl FnOnce(&R) -> bool,
    ) -> Result<R, WriteError> {
        let logged = self.degree.is_logged();
        let lone = matches!(self.gate, Gate::Pending);
        // Whether it will be recorded, as far as can be told before the lock (see `lock`).
        let expected = logged || self.record().replicate;
        if expected {
            self.check_and_encode(db, args, lone)?;
        }
        self.lock();
        let recorded = logged || self.record().replicate;
        if recorded && !expected {
            // The first replica connected in between: encode it now, under the lock.
            self.check_and_encode(db, args, lone)?;
        }
        let result = apply(self.client, args);
        let record = self.record();
        if recorded && ok(&result) {
            if lone {
                if logged {
                    record.degree = record.degree.max(record.current);
                }
            } else {
                record.push(db, std::mem::take(args));
            }
        } else if lone {
            record.encoded = None;
        }
        Ok(result)
    }

    /// The record-size check, and the encoding of a lone command (see `apply_command`).
    fn check_and_encode(
        &mut self,
        db: usize,
        args: &[Bytes],
        lone: bool,
    ) -> Result<(), WriteError> {
        let record = self.record();
        if !record.room.fits(args) {
            return Err(WriteError::RecordTooLarge {
                len: record.room.len_with(args),
            });
        }
        if lone {
            record.encoded = Some(record::encode_command(record.now_ms, db, args));
        }
        Ok(())
    }

    fn record(&mut self) -> &mut OpenRecord {
        self.client
            .record
            .as_mut()
            .expect("a write transaction's record is open until it ends")
    }

    /// End the transaction: append what it logged as one record, while its locks are still held,
    /// and note the LSN the connection's reply must wait for (strict, or background while the log
    /// is late). A transaction joined to an enclosing one leaves its writes in that one's record.
    pub fn commit(mut self) -> Result<(), WriteError> {
        if matches!(self.gate, Gate::Joined) {
            return Ok(());
        }
        // Most writes log nothing (a `none` keyspace, no replica): close the record without
        // moving it out.
        let records_nothing = self.client.record.as_ref().is_none_or(|r| {
            r.commands.is_empty() && (r.encoded.is_none() || !(r.degree.is_logged() || r.replicate))
        });
        if records_nothing {
            self.client.record = None;
            return Ok(());
        }
        let Some(record) = self.client.record.take() else {
            return Ok(());
        };
        let all_logged = record.logged.iter().all(|l| *l);
        // What the local log gets: the lone command, or the logged commands.
        let local = if !record.degree.is_logged() {
            None
        } else if let Some(payload) = &record.encoded {
            Some(payload.clone())
        } else if all_logged {
            Some(record::encode_commands(record.now_ms, &record.commands))
        } else {
            let logged: Vec<LoggedCommand> = record
                .commands
                .iter()
                .zip(&record.logged)
                .filter(|(_, l)| **l)
                .map(|(c, _)| c.clone())
                .collect();
            (!logged.is_empty()).then(|| record::encode_commands(record.now_ms, &logged))
        };
        if let Some(payload) = &local {
            append(self.shared, self.client, payload.clone(), record.degree).map_err(|e| {
                tracing::error!(error = %e, "log append failed");
                WriteError::NotLogged(e)
            })?;
        }
        if record.replicate {
            // What replicas get: every command, logged here or not.
            let streamed = match (&record.encoded, &local) {
                (Some(payload), _) => Some(payload.clone()),
                (None, Some(payload)) if all_logged => Some(payload.clone()),
                (None, _) if record.commands.is_empty() => None,
                (None, _) => Some(record::encode_commands(record.now_ms, &record.commands)),
            };
            if let Some(payload) = streamed {
                let limits = crate::repl::primary::replica_limits(self.shared);
                self.client.repl_offset = self.shared.repl.feed_record(&payload, limits);
                if record.degree == Durability::Replicated {
                    self.client.replicated_offset = self.client.repl_offset;
                }
            }
        }
        // The locks go only now (with `self`): the record is in the log in the order it applied.
        self.order.take();
        Ok(())
    }
}

impl Drop for WriteTxn<'_, '_> {
    fn drop(&mut self) {
        if !matches!(self.gate, Gate::Joined) {
            self.client.record = None;
        }
    }
}

/// The degree a write by `client` in `scope` gets, once the log is known to take it.
fn writable_degree(
    shared: &Shared,
    client: &ClientState,
    scope: Scope,
) -> Result<Durability, WriteError> {
    let mut degree = degree(shared, client, scope)?;
    if degree == Durability::Replicated {
        if client.from_primary {
            // A replica applying its primary's stream: as strict here (its acknowledgement is
            // what the primary's `replicated` write waits for).
            degree = Durability::Strict;
        } else if !shared.repl.can_replicate() {
            return Err(WriteError::NoReplicas);
        }
    }
    check_writable(shared, degree)?;
    Ok(degree)
}

/// The degree of a write by `client` in `scope`. In a logged keyspace an override of `none` is
/// raised to `lazy`: every write there is logged, so a replay can never resurrect an older value
/// over an unlogged newer one. A logged override in a keyspace that is never logged is refused.
pub fn degree(
    shared: &Shared,
    client: &ClientState,
    scope: Scope,
) -> Result<Durability, WriteError> {
    let p = &shared.persist;
    let (base, db) = match scope {
        Scope::Keyspace(db) => (p.degrees.get(db).copied().unwrap_or(Durability::None), db),
        Scope::Tenant(db) => {
            let group = p.flush_groups.get(db);
            let strongest = p
                .degrees
                .iter()
                .zip(&p.flush_groups)
                .filter(|(_, g)| Some(*g) == group)
                .map(|(d, _)| *d)
                .max()
                .unwrap_or(Durability::None);
            (strongest, db)
        }
        Scope::Across { from, to } => {
            let (f, t) = (p.db_logged(from), p.db_logged(to));
            if !f && t {
                let select = |g| shared.tenancy.select_of(g);
                return Err(WriteError::FromUnlogged {
                    from: select(from),
                    to: select(to),
                });
            }
            let of = |g: usize| p.degrees.get(g).copied().unwrap_or(Durability::None);
            (of(from).max(of(to)), from)
        }
        Scope::Swap(a, b) => {
            let describe = |g: usize| {
                let degree = p.degrees.get(g).copied().unwrap_or(Durability::None);
                let evict = shared.tenancy.keyspaces.get(g).is_some_and(|k| k.evict);
                (degree, evict, shared.tenancy.select_of(g))
            };
            let (da, ea, sa) = describe(a);
            let (db_, eb, sb) = describe(b);
            if da != db_ || ea != eb {
                let text = |d: Durability, e: bool| {
                    format!(
                        "durability {d}, eviction {}",
                        if e { "lru" } else { "none" }
                    )
                };
                return Err(WriteError::SwapMismatch {
                    a: (sa, text(da, ea)),
                    b: (sb, text(db_, eb)),
                });
            }
            (da, a)
        }
        Scope::Evictions(tenant) => {
            let t = &shared.tenancy;
            let all: Vec<usize> = (0..t.keyspaces.len()).collect();
            let keyspaces = match tenant {
                Some(tenant) => &t.tenants[tenant].keyspaces,
                None => &all,
            };
            let strongest = keyspaces
                .iter()
                .filter(|&&k| t.keyspaces[k].evict && p.db_logged(k))
                .filter_map(|&k| p.degrees.get(k).copied())
                .max()
                .unwrap_or(Durability::None);
            return Ok(strongest);
        }
    };
    if !p.logged || !base.is_logged() {
        return match client.durability {
            Some(d) if d.is_logged() => Err(WriteError::UnloggedKeyspace { degree: d, db }),
            _ => Ok(Durability::None),
        };
    }
    Ok(match client.durability {
        Some(Durability::None) => Durability::Lazy,
        Some(d) => d,
        None => base,
    })
}

/// Refuse logged writes once the log is poisoned or stalled (Redis' MISCONF for a failing AOF).
pub fn check_writable(shared: &Shared, degree: Durability) -> Result<(), WriteError> {
    if let (true, Some(log)) = (degree.is_logged(), shared.persist.log.get()) {
        if let Some(reason) = log.poisoned() {
            return Err(WriteError::Poisoned(reason.to_string()));
        }
        if let Some(reason) = log.stalled() {
            return Err(WriteError::Stalled(reason.to_string()));
        }
    }
    Ok(())
}

/// Append an encoded record; records the LSN on the client.
fn append(
    shared: &Shared,
    client: &mut ClientState,
    payload: Bytes,
    degree: Durability,
) -> Result<Lsn, LogError> {
    let Some(log) = shared.persist.log.get() else {
        return Err(LogError::NotLogged);
    };
    let appended = log.append_bounded(payload, degree)?;
    let lsn = appended.lsn;
    client.last_write_lsn = lsn;
    // A background write made while the writer is late is held like a strict one, so an
    // acknowledged write is never outside the loss window by more than one fsync.
    if degree >= Durability::Strict || appended.late {
        client.strict_lsn = client.strict_lsn.max(lsn);
    }
    Ok(lsn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Shared;
    use gradus_log::{Log, LogOptions, RecoveryBatch, SimStorage};
    use std::sync::Arc;

    /// A server state whose database 0 is `background` and database 1 `none`, with a log on a
    /// simulated disk (so the records a transaction appends can be read back).
    struct Fixture {
        shared: Shared,
        storage: SimStorage,
        client: ClientState,
    }

    const NOW: u64 = 1_800_000_000_000;

    fn options() -> LogOptions {
        let mut options = LogOptions::new(std::path::PathBuf::from("/data"));
        options.zero_fill_window = std::time::Duration::ZERO;
        options
    }

    impl Fixture {
        fn new() -> Fixture {
            let mut config = crate::Config::embedded();
            config.durability.default = "background".into();
            config
                .durability
                .databases
                .insert("1".into(), "none".into());
            let tenancy = crate::tenancy::Tenancy::build(&config, &[]).expect("default tenancy");
            let shared = Shared::new(config, None, tenancy);
            let storage = SimStorage::new(7);
            let (log, _) =
                Log::open_streaming(options(), Arc::new(storage.clone()), &mut |_| Ok(()))
                    .expect("a fresh log opens");
            let _ = shared.persist.log.set(log);
            let unspecified = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            let handle = Arc::new(crate::client::ClientHandle::new(
                1,
                unspecified,
                unspecified,
            ));
            Fixture {
                shared,
                storage,
                client: ClientState::new(handle, true),
            }
        }

        /// Every record in the log, each as its commands' arguments joined by spaces.
        fn records(&self) -> Vec<Vec<String>> {
            let log = self.shared.persist.log.get().expect("open");
            log.sync_now().expect("sync");
            let mut found = Vec::new();
            let mut sink = |batch: RecoveryBatch<'_>| {
                if let RecoveryBatch::Records(records) = batch {
                    for (_, payload) in records.drain(..) {
                        let Ok(record::Record::Commands { commands, .. }) =
                            record::decode(&payload)
                        else {
                            return Err("not a command record".to_string());
                        };
                        found.push(
                            commands
                                .iter()
                                .map(|c| {
                                    let words: Vec<_> =
                                        c.args.iter().map(|a| String::from_utf8_lossy(a)).collect();
                                    format!("{}:{}", c.db, words.join(" "))
                                })
                                .collect(),
                        );
                    }
                }
                Ok(())
            };
            Log::open_streaming(options(), Arc::new(self.storage.reboot()), &mut sink)
                .expect("the log reopens");
            found
        }
    }

    fn args(words: &str) -> Vec<Bytes> {
        words
            .split(' ')
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect()
    }

    /// Apply-and-log one command the way the RESP front end does, inside whatever is open.
    fn set(f: &mut Fixture, command: &str, succeeds: bool) -> Result<(), WriteError> {
        let db = f.client.db;
        let mut txn = WriteTxn::begin(&f.shared, &mut f.client, Scope::Keyspace(db), NOW, false)?;
        txn.apply_command(db, &mut args(command), |_, _| succeeds, |ok| *ok)?;
        txn.commit()
    }

    #[test]
    fn a_lone_write_is_one_record_and_a_strict_one_holds_its_reply() {
        let mut f = Fixture::new();
        set(&mut f, "SET a 1", true).unwrap();
        assert_eq!(f.client.strict_lsn, 0, "background: the reply goes at once");
        f.client.durability = Some(Durability::Strict);
        set(&mut f, "SET b 2", true).unwrap();
        assert_eq!(f.client.strict_lsn, f.client.last_write_lsn);
        assert!(f.client.strict_lsn > 0);
        set(&mut f, "SET c 3", false).unwrap();
        assert!(
            f.client.record.is_none(),
            "every transaction closes its record"
        );
        assert_eq!(
            f.records(),
            [["0:SET a 1"], ["0:SET b 2"]],
            "a failed write is not logged"
        );
    }

    #[test]
    fn writes_inside_a_transaction_join_its_one_record_in_the_order_they_ran() {
        let mut f = Fixture::new();
        let shared = &f.shared;
        let mut exec = WriteTxn::begin_exclusive(shared, &mut f.client, NOW, false).unwrap();
        {
            let client = exec.client();
            let mut txn = WriteTxn::begin(shared, client, Scope::Keyspace(0), NOW, false).unwrap();
            txn.apply_command(0, &mut args("SET s x"), |_, _| true, |ok| *ok)
                .unwrap();
            txn.commit().unwrap();
            // A command that logs its effects (SESSION.CLOSE) joins the same record, after it.
            let mut txn = WriteTxn::begin(shared, client, Scope::Keyspace(0), NOW, false).unwrap();
            txn.apply(|client| log_effect(client, 0, args("SET s y")));
            txn.commit().unwrap();
            // A write in a `none` keyspace runs but is not logged.
            client.db = 1;
            let mut txn = WriteTxn::begin(shared, client, Scope::Keyspace(1), NOW, false).unwrap();
            txn.apply(|client| log_effect(client, 1, args("SET cache z")));
            txn.commit().unwrap();
            client.db = 0;
            // A script inside the transaction joins it too.
            let script = WriteTxn::begin_exclusive(shared, client, NOW, false).unwrap();
            script.commit().unwrap();
            let mut txn = WriteTxn::begin(shared, client, Scope::Keyspace(0), NOW, false).unwrap();
            txn.apply_command(0, &mut args("DEL t"), |_, _| true, |ok| *ok)
                .unwrap();
            txn.commit().unwrap();
        }
        assert!(exec.client().record.is_some(), "open until EXEC commits");
        exec.commit().unwrap();
        assert!(f.client.record.is_none());
        assert_eq!(f.records(), [["0:SET s x", "0:SET s y", "0:DEL t"]]);
    }

    /// Two transactions holding different keys' shards are open at once (scripts on other keys
    /// run in parallel); an exclusive one waits until neither is open; a key-locked one logs its
    /// writes as one record. The keys are picked in distinct shards.
    #[test]
    fn key_locked_transactions_on_other_keys_run_together_and_exclusive_waits() {
        let f = Fixture::new();
        let ks = f.shared.store.db(0).unwrap();
        let a = Bytes::from_static(b"a");
        let b = (0..1000)
            .map(|i| Bytes::from(format!("b{i}")))
            .find(|k| ks.shard_index(k) != ks.shard_index(&a))
            .unwrap();
        let shared = Arc::new(f.shared);
        let unspecified = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        let client = move |id| {
            ClientState::new(
                Arc::new(crate::client::ClientHandle::new(
                    id,
                    unspecified,
                    unspecified,
                )),
                true,
            )
        };
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let holder = {
            let (shared, a) = (shared.clone(), a.clone());
            std::thread::spawn(move || {
                let mut c = client(2);
                let mut txn =
                    WriteTxn::begin_keyed(&shared, &mut c, NOW, false, 0, std::slice::from_ref(&a))
                        .unwrap();
                assert!(txn.is_keyed());
                let inner = txn.client();
                let mut w =
                    WriteTxn::begin(&shared, inner, Scope::Keyspace(0), NOW, false).unwrap();
                w.apply_command(0, &mut args("SET a 1"), |_, _| true, |ok| *ok)
                    .unwrap();
                w.commit().unwrap();
                // The shard is held: locking it here borrows the hold.
                assert!(shared.store.db(0).unwrap().holds(&a));
                drop(shared.store.db(0).unwrap().lock(&a));
                held_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                txn.commit().unwrap();
            })
        };
        held_rx.recv().unwrap();
        // Another key-locked transaction on another shard opens while the first is open.
        let mut c = client(3);
        let other = WriteTxn::begin_keyed(&shared, &mut c, NOW, false, 0, std::slice::from_ref(&b))
            .unwrap();
        assert!(other.is_keyed());
        drop(other);
        // An exclusive one waits for the first.
        let exclusive_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let waiter = {
            let (shared, done) = (shared.clone(), exclusive_done.clone());
            std::thread::spawn(move || {
                let mut c = client(4);
                let txn = WriteTxn::begin_exclusive(&shared, &mut c, NOW, false).unwrap();
                done.store(true, std::sync::atomic::Ordering::SeqCst);
                drop(txn);
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!exclusive_done.load(std::sync::atomic::Ordering::SeqCst));
        go_tx.send(()).unwrap();
        holder.join().unwrap();
        waiter.join().unwrap();
        assert!(exclusive_done.load(std::sync::atomic::Ordering::SeqCst));
        let ks = shared.store.db(0).unwrap();
        assert!(
            ks.try_hold([a.as_ref()]).is_ok(),
            "the commit let the shards go"
        );
    }

    /// The commands of every record streamed since offset 1, each as in `records`.
    fn streamed(f: &Fixture) -> Vec<Vec<String>> {
        let mut wire =
            bytes::BytesMut::from(&f.shared.repl.backlog_from(1).expect("a backlog")[..]);
        let mut found = Vec::new();
        while let Some((frame, _)) = crate::repl::stream::decode(&mut wire).expect("frames") {
            let crate::repl::stream::Frame::Record(body) = frame else {
                continue;
            };
            let Ok(record::Record::Commands { commands, .. }) = record::decode(&body) else {
                panic!("not a command record");
            };
            found.push(
                commands
                    .iter()
                    .map(|c| {
                        let words: Vec<_> =
                            c.args.iter().map(|a| String::from_utf8_lossy(a)).collect();
                        format!("{}:{}", c.db, words.join(" "))
                    })
                    .collect(),
            );
        }
        found
    }

    #[test]
    fn without_a_backlog_a_none_write_builds_no_record() {
        let mut f = Fixture::new();
        f.client.db = 1;
        set(&mut f, "SET cache v", true).unwrap();
        assert_eq!(f.shared.repl.offset(), 0);
        assert!(f.shared.repl.backlog_from(1).is_none());
        assert!(f.records().is_empty());
    }

    #[test]
    fn with_a_backlog_every_write_is_streamed_and_only_logged_ones_are_logged() {
        let mut f = Fixture::new();
        f.shared.repl.activate();
        set(&mut f, "SET a 1", true).unwrap();
        f.client.db = 1;
        set(&mut f, "SET cache v", true).unwrap();
        set(&mut f, "SET failed v", false).unwrap();
        f.client.db = 0;
        // A MULTI across both keyspaces: the log gets the logged command, the stream both.
        let shared = &f.shared;
        let mut exec = WriteTxn::begin_exclusive(shared, &mut f.client, NOW, false).unwrap();
        {
            let client = exec.client();
            for (db, words) in [(0, "SET s x"), (1, "SET c y")] {
                client.db = db;
                let mut txn =
                    WriteTxn::begin(shared, client, Scope::Keyspace(db), NOW, false).unwrap();
                txn.apply_command(db, &mut args(words), |_, _| true, |ok| *ok)
                    .unwrap();
                txn.commit().unwrap();
            }
            client.db = 0;
        }
        exec.commit().unwrap();
        assert_eq!(f.client.repl_offset, f.shared.repl.offset());
        assert_eq!(
            streamed(&f),
            [
                vec!["0:SET a 1".to_string()],
                vec!["1:SET cache v".to_string()],
                vec!["0:SET s x".to_string(), "1:SET c y".to_string()],
            ]
        );
        assert_eq!(f.records(), [["0:SET a 1"], ["0:SET s x"]]);
    }

    #[test]
    fn a_transaction_dropped_without_commit_logs_nothing_and_closes_its_record() {
        let mut f = Fixture::new();
        {
            let mut exec = WriteTxn::begin_exclusive(&f.shared, &mut f.client, NOW, false).unwrap();
            let client = exec.client();
            let mut txn =
                WriteTxn::begin(&f.shared, client, Scope::Keyspace(0), NOW, false).unwrap();
            txn.apply(|client| log_effect(client, 0, args("SET a 1")));
            txn.commit().unwrap();
        }
        assert!(f.client.record.is_none());
        set(&mut f, "SET b 2", true).unwrap();
        assert_eq!(f.records(), [["0:SET b 2"]]);
    }

    #[test]
    fn the_degree_follows_the_scope_and_the_connections_override() {
        let mut f = Fixture::new();
        let d = |f: &Fixture, scope| degree(&f.shared, &f.client, scope).unwrap();
        assert_eq!(d(&f, Scope::Keyspace(0)), Durability::Background);
        assert_eq!(d(&f, Scope::Keyspace(1)), Durability::None);
        assert_eq!(
            d(&f, Scope::Tenant(1)),
            Durability::Background,
            "the strongest of the tenant"
        );
        f.client.durability = Some(Durability::None);
        assert_eq!(
            d(&f, Scope::Keyspace(0)),
            Durability::Lazy,
            "a logged keyspace is always logged"
        );
        f.client.durability = Some(Durability::Strict);
        assert_eq!(d(&f, Scope::Keyspace(0)), Durability::Strict);
        assert!(matches!(
            degree(&f.shared, &f.client, Scope::Keyspace(1)),
            Err(WriteError::UnloggedKeyspace { db: 1, .. })
        ));
        // Refused before anything is applied, and no record is left open.
        f.client.db = 1;
        assert!(set(&mut f, "SET k v", true).is_err());
        assert!(f.client.record.is_none());
        assert!(f.records().is_empty());
    }

    #[test]
    fn a_write_across_keyspaces_follows_both_degrees() {
        let mut f = Fixture::new();
        let d = |f: &Fixture, scope| degree(&f.shared, &f.client, scope);
        // 0 and 2 are background, 1 is none.
        assert_eq!(
            d(&f, Scope::Across { from: 0, to: 1 }).unwrap(),
            Durability::Background,
            "out of a logged keyspace: logged (the replay removes the key there)"
        );
        assert!(matches!(
            d(&f, Scope::Across { from: 1, to: 0 }),
            Err(WriteError::FromUnlogged { from: 1, to: 0 })
        ));
        assert_eq!(
            d(&f, Scope::Across { from: 2, to: 0 }).unwrap(),
            Durability::Background
        );
        assert_eq!(d(&f, Scope::Swap(0, 2)).unwrap(), Durability::Background);
        let refused = d(&f, Scope::Swap(0, 1)).unwrap_err();
        assert_eq!(
            CmdError::from(&refused).to_string(),
            "ERR SWAPDB needs two databases of the same durability and eviction policy \
             (database 0: durability background, eviction none, database 1: durability none, eviction none)"
        );
        f.client.durability = Some(Durability::Strict);
        assert_eq!(d(&f, Scope::Swap(0, 2)).unwrap(), Durability::Strict);
        // Refused before anything is applied: no record is left open and nothing is logged.
        let refused = WriteTxn::begin(&f.shared, &mut f.client, Scope::Swap(0, 1), NOW, false)
            .err()
            .expect("refused");
        assert!(matches!(refused, WriteError::SwapMismatch { .. }));
        assert!(f.client.record.is_none());
        let mut txn =
            WriteTxn::begin(&f.shared, &mut f.client, Scope::Swap(0, 2), NOW, false).unwrap();
        txn.apply_command(0, &mut args("SWAPDB 0 2"), |_, _| true, |ok| *ok)
            .unwrap();
        txn.commit().unwrap();
        assert_eq!(f.records(), [["0:SWAPDB 0 2"]]);
    }

    #[test]
    fn each_failure_has_one_text_in_each_protocols_form() {
        let oom = WriteError::Oom {
            what: "keyspace site:cache".into(),
        };
        assert_eq!(
            oom.memcached_line(),
            "SERVER_ERROR out of memory storing object"
        );
        assert_eq!(
            CmdError::from(&oom).to_string(),
            "OOM command not allowed when used memory > 'memory-limit' of keyspace site:cache"
        );
        let poisoned = WriteError::Poisoned("fsync failed".into());
        assert!(poisoned
            .to_string()
            .starts_with("MISCONF the write-ahead log is poisoned"));
        assert_eq!(
            poisoned.memcached_line(),
            format!("SERVER_ERROR {poisoned}"),
            "memcached's form carries the same text"
        );
        let large = WriteError::RecordTooLarge {
            len: MAX_RECORD_LEN + 1,
        };
        assert!(large
            .memcached_line()
            .starts_with("SERVER_ERROR the write's log record would be"));
    }
}
