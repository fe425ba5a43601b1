//! Replication: a primary streams every write to its replicas; a replica follows its primary.
//!
//! What this module owns:
//! - [`Repl`], the replication state every connection shares: the role (primary, or replica of
//!   a host and port), the replication ids (`master_replid`, and `master_replid2` with
//!   `second_repl_offset` after a promotion, so replicas of the old primary can continue: Redis'
//!   PSYNC2), the replication offset, the [`backlog`] (created when the first replica connects,
//!   as Redis does), the connected replicas with their acknowledged offsets, the counters INFO
//!   reports, and the live replication settings;
//! - [`stream`], the wire format after `PSYNC`'s reply (pure);
//! - [`primary`], serving a replica's connection once it sent `PSYNC`/`SYNC`: a full snapshot or
//!   the missing part of the backlog, then the stream, while reading its `REPLCONF ACK`s;
//! - [`replica`], the task that follows a primary: handshake, full or partial resync, applying
//!   records through this server's own write path (so it logs at its own keyspace degrees and
//!   feeds its own backlog for its replicas), acknowledgements.
//!
//! The write path (`persist::write`) calls [`Repl::feed_record`] with every committed record
//! while it holds the write-order lock (or the exclusive gate), so the stream's order is the
//! order in which writes reached memory; records of `none` keyspaces are streamed too (a
//! replica of a cache is a warm cache). Before any replica has connected no backlog exists and
//! the write path encodes nothing for `none` keyspaces ([`Repl::is_active`]).
//!
//! May import: `state`, `client`, `persist` (records, snapshots, the write path), `dispatch` and
//! `command` (the replica applies records as commands; ROLE/INFO read this), `settings`, `error`,
//! `tls` (the link's stream, plain or TLS), `pubsub` (the output limits), `gradus-store`,
//! `gradus-log`, `gradus-proto`.

pub mod backlog;
pub mod failover;
pub mod primary;
pub mod replica;
pub mod stream;

use crate::client::ClientHandle;
use backlog::Backlog;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// The replication settings `CONFIG SET` may change (rows of the settings table read and set
/// these).
pub struct ReplSettings {
    /// `replicaof` as it is now ("host port", or empty on a primary): REPLICAOF changes it;
    /// CONFIG SET may not (as Redis).
    pub replicaof: Mutex<String>,
    pub masterauth: Mutex<String>,
    pub masteruser: Mutex<String>,
    pub read_only: AtomicBool,
    pub serve_stale_data: AtomicBool,
    pub priority: AtomicU64,
    pub announce_ip: Mutex<String>,
    pub announce_port: AtomicU64,
    pub announced: AtomicBool,
    pub backlog_size: AtomicUsize,
    pub min_replicas_to_write: AtomicU64,
    pub min_replicas_max_lag: AtomicU64,
    /// Seconds between PINGs in the stream (`repl-ping-replica-period`).
    pub ping_period: AtomicU64,
    /// Seconds of silence after which a replica drops its link (`repl-timeout`).
    pub timeout: AtomicU64,
}

impl Default for ReplSettings {
    fn default() -> Self {
        ReplSettings {
            replicaof: Mutex::new(String::new()),
            masterauth: Mutex::new(String::new()),
            masteruser: Mutex::new(String::new()),
            read_only: AtomicBool::new(true),
            serve_stale_data: AtomicBool::new(true),
            priority: AtomicU64::new(100),
            announce_ip: Mutex::new(String::new()),
            announce_port: AtomicU64::new(0),
            announced: AtomicBool::new(true),
            backlog_size: AtomicUsize::new(1 << 20),
            min_replicas_to_write: AtomicU64::new(0),
            min_replicas_max_lag: AtomicU64::new(10),
            ping_period: AtomicU64::new(10),
            timeout: AtomicU64::new(60),
        }
    }
}

/// Where a connected replica is in its sync (INFO `slaveN:…,state=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum LinkState {
    /// Being sent a full snapshot (Redis: `wait_bgsave` / `send_bulk`).
    SendBulk = 0,
    Online = 1,
}

/// One replica connected to this server.
pub struct ReplicaLink {
    pub handle: Arc<ClientHandle>,
    /// The address it announced (REPLCONF ip-address) or its peer address.
    pub ip: Mutex<String>,
    /// Its listening port (REPLCONF listening-port).
    pub port: AtomicU64,
    state: std::sync::atomic::AtomicU8,
    /// The offset it acknowledged (REPLCONF ACK): everything up to it is applied there, and
    /// durable at the degree of its keyspaces.
    pub ack_offset: AtomicU64,
    /// When it last acknowledged (Unix ms): INFO's `lag`, `min-replicas-max-lag`.
    pub last_ack_ms: AtomicU64,
    /// Stream frames not yet written to it, and their bytes.
    queue: Mutex<VecDeque<Bytes>>,
    queued_bytes: AtomicUsize,
    /// Since when (Unix ms) the queue has been over the soft limit (0: it is not).
    over_soft_since: AtomicU64,
    wake: tokio::sync::Notify,
    /// Dropped for a full queue; the connection ends and the replica must fully resync.
    dropped: AtomicBool,
}

impl ReplicaLink {
    pub fn new(handle: Arc<ClientHandle>, ip: String, port: u64) -> Arc<ReplicaLink> {
        Arc::new(ReplicaLink {
            handle,
            ip: Mutex::new(ip),
            port: AtomicU64::new(port),
            state: std::sync::atomic::AtomicU8::new(LinkState::SendBulk as u8),
            ack_offset: AtomicU64::new(0),
            last_ack_ms: AtomicU64::new(gradus_store::now_ms()),
            queue: Mutex::new(VecDeque::new()),
            queued_bytes: AtomicUsize::new(0),
            over_soft_since: AtomicU64::new(0),
            wake: tokio::sync::Notify::new(),
            dropped: AtomicBool::new(false),
        })
    }

    pub fn state(&self) -> LinkState {
        if self.state.load(Ordering::Relaxed) == LinkState::Online as u8 {
            LinkState::Online
        } else {
            LinkState::SendBulk
        }
    }

    pub fn set_state(&self, state: LinkState) {
        self.state.store(state as u8, Ordering::Relaxed);
    }

    /// Queue a frame for it, unless its queue is over the replica class's output limits: then
    /// it is dropped (its connection is killed) and must fully resync.
    fn push(&self, frame: Bytes, limits: crate::pubsub::ClassLimits) {
        if self.dropped.load(Ordering::Relaxed) {
            return;
        }
        let queued = self.queued_bytes.fetch_add(frame.len(), Ordering::Relaxed) + frame.len();
        self.queue.lock().push_back(frame);
        let now = gradus_store::now_ms();
        let over_hard = limits.hard > 0 && queued as u64 > limits.hard;
        let over_soft = limits.soft > 0 && queued as u64 > limits.soft;
        let soft_too_long = if over_soft {
            let since = self.over_soft_since.load(Ordering::Relaxed);
            if since == 0 {
                self.over_soft_since.store(now, Ordering::Relaxed);
                false
            } else {
                now.saturating_sub(since) / 1000 >= limits.soft_seconds
            }
        } else {
            self.over_soft_since.store(0, Ordering::Relaxed);
            false
        };
        if over_hard || soft_too_long {
            tracing::warn!(
                client = self.handle.id,
                queued,
                "replica is too slow for the replica class's output limits; dropping it (it must fully resync)"
            );
            self.dropped.store(true, Ordering::Relaxed);
            self.handle.kill();
        }
        self.wake.notify_one();
    }

    /// Take every queued frame.
    fn take(&self) -> Vec<Bytes> {
        let frames: Vec<Bytes> = self.queue.lock().drain(..).collect();
        let n: usize = frames.iter().map(Bytes::len).sum();
        self.queued_bytes.fetch_sub(n, Ordering::Relaxed);
        frames
    }

    /// The bytes queued for it now.
    pub fn queued(&self) -> usize {
        self.queued_bytes.load(Ordering::Relaxed)
    }
}

/// What this server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Primary,
    /// A replica of `host:port`.
    Replica {
        host: String,
        port: u16,
    },
}

/// How a replica's link to its primary is doing (INFO replication on a replica, ROLE).
#[derive(Debug, Clone, Default)]
pub struct MasterLink {
    /// ROLE's word: `connect`, `connecting`, `sync` or `connected`.
    pub state: &'static str,
    /// Unix ms of the last byte read from the primary (0: never).
    pub last_io_ms: u64,
    /// Unix ms when the link went down (0: it is up, or was never up since REPLICAOF).
    pub down_since_ms: u64,
    /// Why the last attempt failed (a refused layout, a refused AUTH), for INFO.
    pub last_error: String,
}

/// The replication state (see the module docs).
pub struct Repl {
    /// Whether a backlog exists (set when the first replica connects, or on a replica): the
    /// write path then encodes and streams writes of `none` keyspaces too.
    active: AtomicBool,
    /// Whether `role` is a replica (read on every write; `role` holds the details).
    replica: AtomicBool,
    inner: Mutex<Inner>,
    pub settings: Arc<ReplSettings>,
    pub role: Mutex<Role>,
    pub link: Mutex<MasterLink>,
    /// The running replica task (REPLICAOF host port); aborted by REPLICAOF NO ONE.
    pub link_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Bumped at every REPLICAOF, so an old task that is still finishing knows it is stale.
    pub link_epoch: AtomicU64,
    /// The offset this replica has applied (`slave_repl_offset`) and read (`slave_read_repl_offset`).
    pub applied_offset: AtomicU64,
    pub read_offset: AtomicU64,
    pub sync_in_progress: AtomicBool,
    /// Acknowledgements arrived (WAIT waits for them).
    pub acked: tokio::sync::Notify,
    /// INFO stats: `sync_full`, `sync_partial_ok`, `sync_partial_err`.
    pub sync_full: AtomicU64,
    pub sync_partial_ok: AtomicU64,
    pub sync_partial_err: AtomicU64,
    /// Bytes sent from the backlog by partial resyncs (INFO stats `gradus_sync_partial_bytes`).
    pub sync_partial_bytes: AtomicU64,
    /// The keyspace layout's fingerprint (tenants, keyspaces and their indices; users): a
    /// replica refuses a primary whose fingerprint differs.
    pub fingerprint: String,
    /// The server's state itself, for REPLICAOF to start the link task (set at start-up).
    pub shared: std::sync::OnceLock<std::sync::Weak<crate::state::Shared>>,
}

/// How long a session lock held by a page of the old primary stays held after this server is
/// promoted, when it had no lease of its own (see `gradus_store::locks::LockTable::promote`):
/// long enough for the page to reconnect and close it with its token, short enough that a page
/// that died with the old primary does not keep its session locked.
pub const ORPHAN_LOCK_LEASE: std::time::Duration = std::time::Duration::from_secs(30);

/// Stream the session lock table's grants and releases to replicas (LOCK frames, see
/// [`stream::encode_lock`]). Installed once at start-up; only a primary with a backlog feeds
/// them: a replica feeds its primary's LOCK frames on as it applies them (`replica`), so its
/// offset stays its primary's, and a lock taken or expiring on a replica itself is never
/// streamed.
pub fn stream_locks(shared: &Arc<crate::state::Shared>) {
    let weak = Arc::downgrade(shared);
    shared.locks.stream_to(Some(Box::new(move |event| {
        // The caller of the lock operation holds a strong reference: this is never the last.
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let repl = &shared.repl;
        if repl.is_active() && !repl.is_replica() {
            repl.feed_frame(stream::encode_lock(event), primary::replica_limits(&shared));
        }
    })));
}

/// The `replicaof` setting's value (`host port`), if it names a primary.
pub fn parse_replicaof(text: &str) -> Option<(String, u16)> {
    let mut words = text.split_whitespace();
    let host = words.next()?;
    let port = words.next()?.parse().ok()?;
    Some((host.to_string(), port))
}

struct Inner {
    replid: String,
    replid2: String,
    /// The first offset replid2 no longer covers (-1: no replid2).
    second_offset: i64,
    /// The replication offset (`master_repl_offset`), also when no backlog exists.
    offset: u64,
    backlog: Option<Backlog>,
    replicas: Vec<Arc<ReplicaLink>>,
    /// RECORD frames fed so far.
    records: u64,
    /// The frames fed while replicas are connected that some replica may not have acknowledged
    /// yet (oldest first, at most [`MAX_MARKS`]): the lag in records and time.
    marks: VecDeque<Mark>,
}

/// One frame fed while replicas are connected: where it ends in the stream, how many records
/// were fed before it, and when (Unix ms).
struct Mark {
    end: u64,
    records_before: u64,
    at_ms: u64,
}

/// Marks kept at most: past this many unacknowledged frames a replica's lag in records and time
/// is counted from the oldest kept (a lower bound; its lag in bytes stays exact).
const MAX_MARKS: usize = 1 << 16;

/// How far a replica is behind: stream records and bytes it has not acknowledged, and the age of
/// the oldest of them (0 when it acknowledged everything).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lag {
    pub records: u64,
    pub bytes: u64,
    pub ms: u64,
}

impl Inner {
    /// Drop the marks every replica has acknowledged (checked every 256 marks, so a feed costs
    /// O(1) amortised), and the oldest past [`MAX_MARKS`].
    fn forget_acknowledged_marks(&mut self) {
        if !self.marks.len().is_multiple_of(256) && self.marks.len() <= MAX_MARKS {
            return;
        }
        let acked = self
            .replicas
            .iter()
            .map(|r| r.ack_offset.load(Ordering::Relaxed))
            .min()
            .unwrap_or(u64::MAX);
        while self
            .marks
            .front()
            .is_some_and(|m| m.end <= acked || self.marks.len() > MAX_MARKS)
        {
            self.marks.pop_front();
        }
    }

    fn lag(&self, replica: &ReplicaLink, now_ms: u64) -> Lag {
        let acked = replica.ack_offset.load(Ordering::Relaxed);
        let bytes = self.offset.saturating_sub(acked);
        let first = self.marks.partition_point(|m| m.end <= acked);
        match self.marks.get(first) {
            Some(m) if bytes > 0 => Lag {
                records: self.records - m.records_before,
                bytes,
                ms: now_ms.saturating_sub(m.at_ms),
            },
            _ => Lag {
                records: 0,
                bytes,
                ms: 0,
            },
        }
    }
}

/// A new 40-hex-character replication id (or run id).
pub fn new_id() -> String {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    (0..40)
        .map(|_| char::from_digit(rng.gen_range(0..16), 16).unwrap_or('0'))
        .collect()
}

/// What `INFO replication` and ROLE show of the primary side.
#[derive(Clone)]
pub struct PrimaryView {
    pub replid: String,
    pub replid2: String,
    pub second_offset: i64,
    pub offset: u64,
    /// (first byte offset, histlen, size) when a backlog exists.
    pub backlog: Option<(u64, usize, usize)>,
    pub replicas: Vec<Arc<ReplicaLink>>,
    /// Each replica's lag (same order as `replicas`).
    pub lags: Vec<Lag>,
}

/// How a `PSYNC` is answered.
pub enum Resync {
    /// `+CONTINUE <replid>`: the missing bytes, and the link registered to receive what follows.
    Continue { replid: String, missing: Vec<u8> },
    /// `+FULLRESYNC`: a snapshot is needed.
    Full,
}

impl Repl {
    pub fn new(fingerprint: String, settings: Arc<ReplSettings>) -> Repl {
        Repl {
            active: AtomicBool::new(false),
            replica: AtomicBool::new(false),
            inner: Mutex::new(Inner {
                replid: new_id(),
                replid2: "0".repeat(40),
                second_offset: -1,
                offset: 0,
                backlog: None,
                replicas: Vec::new(),
                records: 0,
                marks: VecDeque::new(),
            }),
            settings,
            role: Mutex::new(Role::Primary),
            link: Mutex::new(MasterLink::default()),
            link_task: Mutex::new(None),
            link_epoch: AtomicU64::new(0),
            applied_offset: AtomicU64::new(0),
            read_offset: AtomicU64::new(0),
            sync_in_progress: AtomicBool::new(false),
            acked: tokio::sync::Notify::new(),
            sync_full: AtomicU64::new(0),
            sync_partial_ok: AtomicU64::new(0),
            sync_partial_err: AtomicU64::new(0),
            sync_partial_bytes: AtomicU64::new(0),
            fingerprint,
            shared: std::sync::OnceLock::new(),
        }
    }

    /// Whether writes must be streamed (a backlog exists). One relaxed load: the write path
    /// asks it for every write.
    #[inline]
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Why a replica refuses a command from one of its clients now, if it does: a write when
    /// `replica-read-only` (Redis' READONLY), anything but admin and introspection commands
    /// (`stale_ok`) while the link is down when `replica-serve-stale-data` is no (MASTERDOWN).
    pub fn refusal(&self, write: bool, stale_ok: bool) -> Option<crate::error::CmdError> {
        if !self.is_replica() {
            return None;
        }
        if write && self.settings.read_only.load(Ordering::Relaxed) {
            return Some(crate::error::CmdError::Other(
                "READONLY You can't write against a read only replica.".into(),
            ));
        }
        if !stale_ok
            && !self.settings.serve_stale_data.load(Ordering::Relaxed)
            && self.link.lock().state != "connected"
        {
            return Some(crate::error::CmdError::Other(
                "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."
                    .into(),
            ));
        }
        None
    }

    pub fn is_replica(&self) -> bool {
        self.replica.load(Ordering::Relaxed)
    }

    /// Change the role (REPLICAOF).
    pub fn set_role(&self, role: Role) {
        let mut current = self.role.lock();
        self.replica
            .store(matches!(role, Role::Replica { .. }), Ordering::Relaxed);
        *current = role;
    }

    /// Create the backlog if there is none (the first replica connects; a replica follows).
    /// The caller holds the store gate exclusively or the write-order lock when the order of
    /// what is streamed matters (a full sync arms its snapshot under the exclusive gate).
    pub fn activate(&self) {
        let mut inner = self.inner.lock();
        if inner.backlog.is_none() {
            let size = self.settings.backlog_size.load(Ordering::Relaxed);
            let offset = inner.offset;
            inner.backlog = Some(Backlog::new(size, offset));
        }
        self.active.store(true, Ordering::Release);
    }

    /// Stream one committed record (the write path calls this in log order); returns the
    /// replication offset after it.
    pub fn feed_record(&self, payload: &[u8], limits: crate::pubsub::ClassLimits) -> u64 {
        self.feed(stream::encode(stream::KIND_RECORD, payload), limits, true)
    }

    /// Append a stream frame to the backlog and every replica's queue; returns the offset after it.
    pub fn feed_frame(&self, frame: Bytes, limits: crate::pubsub::ClassLimits) -> u64 {
        self.feed(frame, limits, false)
    }

    fn feed(&self, frame: Bytes, limits: crate::pubsub::ClassLimits, record: bool) -> u64 {
        let mut inner = self.inner.lock();
        inner.offset += frame.len() as u64;
        if let Some(backlog) = inner.backlog.as_mut() {
            backlog.append(&frame);
        }
        for replica in &inner.replicas {
            replica.push(frame.clone(), limits);
        }
        if !inner.replicas.is_empty() {
            let mark = Mark {
                end: inner.offset,
                records_before: inner.records,
                at_ms: gradus_store::now_ms(),
            };
            inner.marks.push_back(mark);
            inner.forget_acknowledged_marks();
        }
        if record {
            inner.records += 1;
        }
        inner.offset
    }

    /// The stream bytes the backlog holds from `offset` on (None: no backlog, or not held).
    pub fn backlog_from(&self, offset: u64) -> Option<Vec<u8>> {
        self.inner.lock().backlog.as_ref()?.read_from(offset)
    }

    /// The replication offset now (`master_repl_offset`).
    pub fn offset(&self) -> u64 {
        self.inner.lock().offset
    }

    pub fn replid(&self) -> String {
        self.inner.lock().replid.clone()
    }

    /// Answer a `PSYNC replid offset`: continue when `replid` is ours (or our previous one, up to
    /// where it covers) and the backlog holds everything from `offset`; the link is then
    /// registered, atomically with reading the missing bytes, so it misses nothing.
    pub fn try_continue(&self, replid: &str, offset: u64, link: &Arc<ReplicaLink>) -> Resync {
        let mut inner = self.inner.lock();
        let ours = replid == inner.replid
            || (replid == inner.replid2
                && inner.second_offset >= 0
                && offset as i64 <= inner.second_offset);
        let missing = match inner.backlog.as_ref() {
            Some(backlog) if ours => backlog.read_from(offset),
            _ => None,
        };
        match missing {
            Some(missing) => {
                link.set_state(LinkState::Online);
                link.ack_offset
                    .store(offset.saturating_sub(1), Ordering::Relaxed);
                inner.replicas.push(link.clone());
                Resync::Continue {
                    replid: inner.replid.clone(),
                    missing,
                }
            }
            None => Resync::Full,
        }
    }

    /// For a full sync, with the store gate held exclusively (nothing is half-applied and every
    /// applied write has been streamed): make sure a backlog exists, register the link so it
    /// receives everything streamed from now on, and return our id and the offset the
    /// snapshot corresponds to.
    pub fn begin_full_sync(&self, link: &Arc<ReplicaLink>) -> (String, u64) {
        self.activate();
        let mut inner = self.inner.lock();
        link.set_state(LinkState::SendBulk);
        inner.replicas.push(link.clone());
        (inner.replid.clone(), inner.offset)
    }

    /// Forget a replica (its connection ended).
    pub fn remove_replica(&self, id: u64) {
        self.inner.lock().replicas.retain(|r| r.handle.id != id);
        self.acked.notify_waiters();
    }

    /// The connected replicas.
    pub fn replicas(&self) -> Vec<Arc<ReplicaLink>> {
        self.inner.lock().replicas.clone()
    }

    /// Replicas online whose acknowledged offset is at least `offset` (WAIT).
    pub fn acked_at_least(&self, offset: u64) -> usize {
        self.inner
            .lock()
            .replicas
            .iter()
            .filter(|r| {
                r.state() == LinkState::Online && r.ack_offset.load(Ordering::Relaxed) >= offset
            })
            .count()
    }

    /// How many replicas must acknowledge a `replicated` write: `min-replicas-to-write`, at least 1.
    pub fn replicas_needed(&self) -> usize {
        self.settings
            .min_replicas_to_write
            .load(Ordering::Relaxed)
            .max(1) as usize
    }

    /// Whether a `replicated` write can be acknowledged at all: this is a primary with enough
    /// replicas online.
    pub fn can_replicate(&self) -> bool {
        self.is_active() && !self.is_replica() && self.online() >= self.replicas_needed()
    }

    /// Replicas online (past their full sync).
    pub fn online(&self) -> usize {
        self.inner
            .lock()
            .replicas
            .iter()
            .filter(|r| r.state() == LinkState::Online)
            .count()
    }

    /// Hold a `replicated` write's reply until [`Repl::replicas_needed`] replicas acknowledged
    /// `offset`. False — the reply must not be sent, and the connection is closed — when fewer
    /// replicas than that remain online, or the connection is killed: a write is acknowledged
    /// at `replicated` only once replicas have it.
    pub async fn wait_replicated(&self, handle: &ClientHandle, offset: u64) -> bool {
        let needed = self.replicas_needed();
        loop {
            let notified = self.acked.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.acked_at_least(offset) >= needed {
                return true;
            }
            if self.online() < needed {
                return false;
            }
            tokio::select! {
                _ = notified => {}
                _ = handle.killed() => return false,
                _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            }
        }
    }

    /// Replicas online that acknowledged within `max_lag_s` seconds (`min-replicas-max-lag`).
    pub fn good_replicas(&self, max_lag_s: u64) -> usize {
        let now = gradus_store::now_ms();
        self.inner
            .lock()
            .replicas
            .iter()
            .filter(|r| {
                r.state() == LinkState::Online
                    && now.saturating_sub(r.last_ack_ms.load(Ordering::Relaxed)) / 1000 <= max_lag_s
            })
            .count()
    }

    pub fn view(&self) -> PrimaryView {
        let inner = self.inner.lock();
        PrimaryView {
            replid: inner.replid.clone(),
            replid2: inner.replid2.clone(),
            second_offset: inner.second_offset,
            offset: inner.offset,
            backlog: inner
                .backlog
                .as_ref()
                .map(|b| (b.first_offset(), b.histlen(), b.size())),
            replicas: inner.replicas.clone(),
            lags: {
                let now = gradus_store::now_ms();
                inner.replicas.iter().map(|r| inner.lag(r, now)).collect()
            },
        }
    }

    /// CONFIG SET repl-backlog-size: resize the backlog if there is one.
    pub fn resize_backlog(&self) {
        let size = self.settings.backlog_size.load(Ordering::Relaxed);
        if let Some(b) = self.inner.lock().backlog.as_mut() {
            b.resize(size);
        }
    }

    /// A replica has loaded a full snapshot from a primary whose id is `replid` at `offset`:
    /// it takes on that id and offset (so its own replicas, and a later promotion, continue
    /// the same history), with a fresh backlog.
    pub fn adopt(&self, replid: &str, offset: u64) {
        let size = self.settings.backlog_size.load(Ordering::Relaxed);
        let mut inner = self.inner.lock();
        inner.replid = replid.to_string();
        inner.replid2 = "0".repeat(40);
        inner.second_offset = -1;
        inner.offset = offset;
        inner.backlog = Some(Backlog::new(size, offset));
        // Its own replicas follow another history now: they must resync.
        for r in inner.replicas.drain(..) {
            r.handle.kill();
        }
        self.active.store(true, Ordering::Release);
    }

    /// A replica continued with a primary whose id is now `replid` (it was promoted since):
    /// our previous id becomes replid2, as Redis' PSYNC2 does.
    pub fn switch_id(&self, replid: &str) {
        let mut inner = self.inner.lock();
        if inner.replid != replid {
            inner.replid2 = std::mem::replace(&mut inner.replid, replid.to_string());
            inner.second_offset = inner.offset as i64 + 1;
        }
    }

    /// Promotion (REPLICAOF NO ONE) or a new primary: a new replication id; the previous one
    /// stays valid as replid2 up to the current offset, so replicas of the old primary can
    /// continue with this one.
    pub fn shift_id(&self) {
        let mut inner = self.inner.lock();
        inner.replid2 = std::mem::replace(&mut inner.replid, new_id());
        inner.second_offset = inner.offset as i64 + 1;
    }
}
