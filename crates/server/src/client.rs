//! Connection state: what one connection owns ([`ClientState`]) and what other connections may see
//! or act on ([`ClientHandle`], kept in the [`ClientRegistry`] for CLIENT LIST/KILL and INFO).
//!
//! The split keeps the hot path lock-free: the connection task owns `ClientState` outright, and the
//! shared handle holds only atomics and small mutexes that are never held across an `.await`.
//!
//! May import: `command` (the spec type of queued commands), `state` (the type deferred replies
//! receive), `persist::write` (the open record); no command handlers.

use crate::command::CommandSpec;
use atomic_waker::AtomicWaker;
use bytes::Bytes;
use gradus_proto::ProtocolVersion;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Notify;

/// A queued transaction (between MULTI and EXEC).
#[derive(Default)]
pub struct MultiState {
    pub queued: Vec<(&'static CommandSpec, Vec<Bytes>)>,
    /// A queueing error happened: EXEC must answer EXECABORT.
    pub dirty: bool,
}

/// A WATCHed key and the version it had when watched (0 = absent).
pub struct Watch {
    pub db: usize,
    pub key: Bytes,
    pub version: u64,
}

/// The future that finishes a deferred reply: it may use the connection's state while it runs.
pub type Completion<'c> = Pin<Box<dyn Future<Output = gradus_proto::Frame> + Send + 'c>>;

/// What finishes a deferred reply, given the server state and the connection.
pub trait Finish:
    for<'c> FnOnce(Arc<crate::state::Shared>, &'c mut ClientState) -> Completion<'c> + Send
{
}

impl<F> Finish for F where
    F: for<'c> FnOnce(Arc<crate::state::Shared>, &'c mut ClientState) -> Completion<'c> + Send
{
}

/// A reply a command could not give at once (a lock wait, WAITAOF, SAVE, a throttled AUTH): the
/// connection writes the replies before it, then awaits this and writes what it yields. The
/// module that defers owns the completion; the connection loop only runs it, so it never calls
/// back into a command module. A handler must not block: it defers instead.
pub struct Deferred {
    /// What it waits for (for logs).
    pub what: &'static str,
    finish: Box<dyn Finish>,
}

impl Deferred {
    /// Defer the reply to `finish`, which is given the server state and the connection.
    pub fn new(
        what: &'static str,
        finish: impl for<'c> FnOnce(Arc<crate::state::Shared>, &'c mut ClientState) -> Completion<'c>
            + Send
            + 'static,
    ) -> Self {
        Self {
            what,
            finish: Box::new(finish),
        }
    }

    /// The completion, made now (so what it sets up — a blocked client's clean-up — exists even
    /// if the future is dropped before it is first polled): await it for the reply.
    pub fn complete(
        self,
        shared: Arc<crate::state::Shared>,
        client: &mut ClientState,
    ) -> Completion<'_> {
        (self.finish)(shared, client)
    }
}

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Deferred({})", self.what)
    }
}

/// Counters a connection keeps locally and adds to the shared ones once per batch, so the hot
/// path never does an atomic read-modify-write on a cache line shared by every core.
/// (Atomics only so `&ClientState` is `Sync`; each is written by its own connection alone, so
/// a plain load and store does, without a locked read-modify-write.)
#[derive(Default)]
pub struct LocalCounters {
    pub commands: AtomicU64,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

impl LocalCounters {
    pub fn bump(counter: &AtomicU64) {
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// What `counter` counted since it was last taken; it starts again at 0.
    pub fn take(counter: &AtomicU64) -> u64 {
        let n = counter.load(Ordering::Relaxed);
        if n > 0 {
            counter.store(0, Ordering::Relaxed);
        }
        n
    }
}

/// CLIENT REPLY (Redis' `CLIENT_REPLY_OFF`, `_SKIP_NEXT`, `_SKIP`): whether a command's reply is
/// sent. Only replies: pushes, pub/sub messages and subscription confirmations still go out,
/// as Redis sends them while "pushing".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyMode {
    On,
    /// CLIENT REPLY OFF: none until CLIENT REPLY ON.
    Off,
    /// CLIENT REPLY SKIP was the command just run (it has no reply): the next one is skipped.
    SkipNext,
    /// This command's reply is skipped, then replies resume.
    Skip,
}

impl ReplyMode {
    /// Whether the reply of the command that just ran is withheld; moves SKIP on to the next
    /// command (call once per command, after it ran).
    pub fn withhold_and_advance(&mut self) -> bool {
        let (withhold, next) = match *self {
            ReplyMode::On => (false, ReplyMode::On),
            ReplyMode::Off => (true, ReplyMode::Off),
            ReplyMode::SkipNext => (true, ReplyMode::Skip),
            ReplyMode::Skip => (true, ReplyMode::On),
        };
        *self = next;
        withhold
    }
}

/// State owned by one connection task.
pub struct ClientState {
    pub id: u64,
    /// The selected keyspace's *global* index (see `tenancy`); SELECT maps the tenant's numbers.
    pub db: usize,
    /// The tenant this connection is bound to (by AUTH; 0 before).
    pub tenant: usize,
    /// The authenticated user's name and rights.
    pub user: Arc<str>,
    pub perms: crate::tenancy::Perms,
    /// The ACL user's rules when the connection authenticated as one (`ACL SETUSER`, aclfile);
    /// checked after `perms` (see `tenancy::acl_users`).
    pub acl: Option<Arc<crate::tenancy::acl_users::AclUser>>,
    pub resp: ProtocolVersion,
    pub authenticated: bool,
    pub multi: Option<MultiState>,
    pub watched: Vec<Watch>,
    /// Close the connection once the current reply is written (QUIT, protocol errors, CLIENT KILL of self).
    pub close_after_reply: bool,
    /// Skip the reply entirely (SHUTDOWN closes without replying, as Redis does).
    pub suppress_reply: bool,
    /// CLIENT REPLY: which replies the connection is sent.
    pub reply_mode: ReplyMode,
    pub handle: Arc<ClientHandle>,
    /// CLIENT DURABILITY override (None = the database's default).
    pub durability: Option<gradus_log::Durability>,
    /// LSN of this connection's last logged write (WAITAOF waits for it).
    pub last_write_lsn: u64,
    /// Highest LSN of a `strict` write whose reply is still pending in this batch.
    pub strict_lsn: u64,
    /// A reply the running command deferred (see [`Deferred`]); the connection completes it.
    pub deferred: Option<Deferred>,
    /// The command whose reply is [`ClientState::deferred`], its arguments and its running
    /// time so far: counted in commandstats and the slow log once its reply is made, as Redis
    /// counts a blocked command when it is unblocked (see `dispatch::run_observed`).
    pub deferred_observation: Option<(
        &'static crate::command::CommandSpec,
        Vec<Bytes>,
        std::time::Duration,
    )>,
    pub counters: LocalCounters,
    /// The record of the write transaction this connection has open (see
    /// `persist::write`): writes run inside EXEC or a script, and commands that log their own
    /// effects, add to it.
    pub record: Option<crate::persist::write::OpenRecord>,
    /// Keys this connection's writes touched while clients were blocked (see `blocking`): served
    /// once the running command has finished.
    pub ready_keys: Vec<(usize, Bytes)>,
    /// Messages others push to this connection (pub/sub, notifications, invalidations): made at
    /// its first subscription (see `pubsub`).
    pub outbox: Option<Arc<crate::pubsub::Outbox>>,
    /// Bytes taken from the outbox into the write buffer and not yet written.
    pub outbox_taken: usize,
    /// The channels, patterns and shard channels this connection listens to.
    pub subs: Option<Box<crate::pubsub::Subscriptions>>,
    /// CLIENT TRACKING options while tracking is on (a copy of what `tracking` holds, so a read
    /// checks them without a lock).
    pub tracking: Option<crate::tracking::Options>,
    /// Messages due to this connection after the running command's reply (invalidations of its
    /// own reads and writes, as Redis orders them).
    pub after_reply: Vec<Bytes>,
    /// Keys written while the running command runs, for its BCAST invalidations once it has
    /// finished (see `tracking::Tracking::broadcast`).
    pub bcast_written: Vec<crate::tracking::Written>,
    /// CLIENT CACHING yes|no: applies to the next command (counted down per command).
    pub caching: Option<(bool, u8)>,
    /// Keys (global keyspace index, key) the running write found absent, while `new` keyspace
    /// notifications are on: its first event on one of them is preceded by `new` (see `notify`).
    pub absent_keys: Vec<(usize, Bytes)>,
    /// Set while a command runs others as its means (SORT … STORE's DEL and RPUSH): their
    /// keyspace events are not published, the command publishes its own.
    pub notify_muted: bool,
    /// `keymiss` events of the running write's reads (see `CommandSpec::read_keys`), published
    /// before its first other event, as Redis looks its sources up first.
    pub pending_misses: Vec<(usize, Bytes)>,
    /// The running command queued its reply in the outbox itself (SUBSCRIBE's confirmations):
    /// the connection writes no other.
    pub reply_queued: bool,
    /// The replication client of a replica: applies the primary's stream (never read-only,
    /// never streamed again by the write path: the replica task feeds its backlog itself).
    pub from_primary: bool,
    /// A script's `redis.call` is running the command now (XREAD's BLOCK is refused there).
    pub in_script: bool,
    /// The errors of the reply just made were counted in INFO errorstats already (a script's
    /// reply: see `command::scripting::execute`); whoever sends or gathers it takes this flag.
    pub errors_counted: bool,
    /// The replication offset after this connection's last streamed write (WAIT waits for it).
    pub repl_offset: u64,
    /// The replication offset a `replicated` write among the pending replies waits for replicas
    /// to acknowledge before they are written (0: none), as `strict_lsn` for the fsync.
    pub replicated_offset: u64,
    /// Set by PSYNC/SYNC: the connection becomes a replica's link once this reply is sent.
    pub repl_takeover: Option<crate::repl::primary::PsyncRequest>,
    /// A command held back by a client pause (see `pause`): the connection waits for the pause
    /// to change, then dispatches it again.
    pub postponed: Option<Vec<Bytes>>,
    /// What the replica said with REPLCONF listening-port / ip-address.
    pub repl_listening_port: u64,
    pub repl_announced_ip: Option<String>,
    /// How much room the next socket read gets (see `connection::between_batches`): 16 KiB,
    /// doubled while reads fill it, up to `connection::MAX_READ_BUFFER`.
    pub read_room: usize,
    /// The capacity the read buffer reached when it was made large for one request (a big
    /// argument), or 0: it is given back once empty (see `connection::between_batches`).
    pub big_read_buffer: usize,
    /// `REPLCONF rdb-only 1` (`redis-cli --rdb`): a SYNC/PSYNC then gets an RDB file and no
    /// stream (see `repl::primary::send_rdb`).
    pub rdb_only: bool,
}

impl ClientState {
    /// The state of the server's own work that runs commands with no connection (log replay,
    /// background eviction): client id 0, no address, authenticated.
    pub fn internal() -> Self {
        let unspecified = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
        ClientState::new(
            Arc::new(ClientHandle::new(0, unspecified, unspecified)),
            true,
        )
    }

    pub fn new(handle: Arc<ClientHandle>, authenticated: bool) -> Self {
        // Made now, so messages others push (an invalidation redirected here) wake it.
        let outbox = handle.outbox();
        Self {
            id: handle.id,
            db: 0,
            tenant: 0,
            user: Arc::from("default"),
            perms: crate::tenancy::Perms::ALL,
            acl: None,
            resp: ProtocolVersion::Resp2,
            authenticated,
            multi: None,
            watched: Vec::new(),
            close_after_reply: false,
            suppress_reply: false,
            reply_mode: ReplyMode::On,
            handle,
            durability: None,
            last_write_lsn: 0,
            strict_lsn: 0,
            deferred: None,
            deferred_observation: None,
            counters: LocalCounters::default(),
            record: None,
            ready_keys: Vec::new(),
            outbox,
            outbox_taken: 0,
            subs: None,
            tracking: None,
            after_reply: Vec::new(),
            bcast_written: Vec::new(),
            caching: None,
            absent_keys: Vec::new(),
            notify_muted: false,
            pending_misses: Vec::new(),
            reply_queued: false,
            from_primary: false,
            in_script: false,
            errors_counted: false,
            repl_offset: 0,
            replicated_offset: 0,
            repl_takeover: None,
            postponed: None,
            repl_listening_port: 0,
            repl_announced_ip: None,
            read_room: crate::connection::READ_BUFFER,
            big_read_buffer: 0,
            rdb_only: false,
        }
    }

    /// The connection's outbox.
    pub fn outbox(&mut self) -> Arc<crate::pubsub::Outbox> {
        let handle = &self.handle;
        self.outbox
            .get_or_insert_with(|| {
                handle
                    .outbox()
                    .unwrap_or_else(|| Arc::new(crate::pubsub::Outbox::new(handle.clone())))
            })
            .clone()
    }

    /// The connection's subscriptions, made on first use (in its tenant).
    pub fn subscriptions(&mut self) -> &mut crate::pubsub::Subscriptions {
        let tenant = self.tenant;
        self.subs
            .get_or_insert_with(|| Box::new(crate::pubsub::Subscriptions::new(tenant)))
    }

    /// True while it listens to any channel, pattern or shard channel (Redis' pub/sub context).
    pub fn is_subscribed(&self) -> bool {
        self.subs.as_ref().is_some_and(|s| !s.is_empty())
    }

    /// Queue `reply` in the outbox, in order with the messages there; the command's reply is
    /// then this (see `reply_queued`).
    pub fn queue_reply(&mut self, reply: &gradus_proto::Frame) {
        let bytes = crate::pubsub::encode_for(reply, self.resp);
        self.outbox().push_own(bytes);
        self.reply_queued = true;
    }

    /// After subscriptions changed: CLIENT LIST's counts, and the output limits' class (a
    /// subscribed connection is a `pubsub` client).
    pub fn note_subscriptions(&mut self) {
        use crate::pubsub::{Kind, LimitClass};
        let counts = self.subs.as_ref().map_or([0; 3], |s| {
            [
                s.len(Kind::Channel),
                s.len(Kind::Pattern),
                s.len(Kind::Shard),
            ]
        });
        for (slot, n) in self.handle.subs.iter().zip(counts) {
            slot.store(n, Ordering::Relaxed);
        }
        let class = if counts.iter().any(|&n| n > 0) {
            LimitClass::Pubsub
        } else {
            LimitClass::Normal
        };
        if let Some(outbox) = &self.outbox {
            outbox.set_class(class);
        }
    }

    /// Move what others queued for this connection to the end of `wbuf` (before the running
    /// command's reply, and before each write).
    pub fn take_pushes(&mut self, wbuf: &mut bytes::BytesMut) {
        if let Some(outbox) = &self.outbox {
            if outbox.has_queued() {
                self.outbox_taken += outbox.drain_into(wbuf);
            }
        }
    }

    /// Whether the command running now runs inside EXEC or a script, where nothing may wait.
    pub fn in_transaction(&self) -> bool {
        self.record.as_ref().is_some_and(|r| r.runs_others())
    }

    /// Forget MULTI and WATCH state (DISCARD, EXEC, RESET).
    pub fn clear_transaction(&mut self) {
        self.multi = None;
        self.watched.clear();
        self.handle.multi_len.store(-1, Ordering::Relaxed);
        self.handle.mem.multi.store(0, Ordering::Relaxed);
        self.handle.watch_count.store(0, Ordering::Relaxed);
    }
}

/// What a connection's buffers hold, for CLIENT LIST's memory fields (Redis' names): written
/// by the connection's own task (relaxed stores, a few per request), read by CLIENT LIST.
#[derive(Default)]
pub struct ConnectionMemory {
    /// `qbuf`: bytes in the read buffer, the running command's included (as Redis keeps the
    /// query buffer until the command has run).
    pub qbuf: AtomicUsize,
    /// `qbuf-free`: room left in the read buffer.
    pub qbuf_free: AtomicUsize,
    /// `argv-mem`: the running command's argument bytes (0 between commands).
    pub argv: AtomicUsize,
    /// `multi-mem`: the queued commands' argument bytes and argument slots (Redis'
    /// `argv_len_sums`).
    pub multi: AtomicUsize,
    /// `rbs`: the reply buffer's size; `rbp`: the most of it used (at least its first size).
    pub reply_size: AtomicUsize,
    pub reply_peak: AtomicUsize,
    /// `obl`: reply bytes in the buffer not yet written.
    pub reply_pending: AtomicUsize,
}

impl ConnectionMemory {
    /// Note the read buffer (`len` bytes of `capacity`) and the reply buffer.
    pub fn note_buffers(&self, read: (usize, usize), write: (usize, usize)) {
        self.qbuf.store(read.0, Ordering::Relaxed);
        self.qbuf_free
            .store(read.1.saturating_sub(read.0), Ordering::Relaxed);
        self.reply_pending.store(write.0, Ordering::Relaxed);
        self.reply_size.store(write.1, Ordering::Relaxed);
        self.reply_peak
            .fetch_max(write.0.max(write.1.min(16 * 1024)), Ordering::Relaxed);
    }

    /// The bytes of `args` as Redis counts them (`argv_len_sum`).
    pub fn argv_len(args: &[Bytes]) -> usize {
        args.iter().map(|a| a.len()).sum()
    }
}

/// What a connection is to this server besides a client of its own: the role the replication
/// link gives it (Redis' `CLIENT_SLAVE` / `CLIENT_MASTER` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ClientRole {
    Normal = 0,
    /// A replica of this server, fed its log.
    Replica = 1,
    /// This server's primary (the link a replica follows it by).
    Master = 2,
}

/// Redis' client types (`getClientType`): what CLIENT LIST TYPE and CLIENT KILL TYPE select by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientType {
    Normal,
    Replica,
    Pubsub,
    Master,
}

impl ClientType {
    /// The names Redis takes (`getClientTypeByName`; `slave` is `replica`).
    const NAMES: &'static [(&'static str, ClientType)] = &[
        ("normal", ClientType::Normal),
        ("slave", ClientType::Replica),
        ("replica", ClientType::Replica),
        ("pubsub", ClientType::Pubsub),
        ("master", ClientType::Master),
    ];

    /// The type a name (ASCII case-insensitive) stands for.
    pub fn by_name(name: &[u8]) -> Option<ClientType> {
        Self::NAMES
            .iter()
            .find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
            .map(|(_, t)| *t)
    }
}

/// What other connections can see of a connection.
pub struct ClientHandle {
    pub id: u64,
    pub addr: SocketAddr,
    pub laddr: SocketAddr,
    /// The socket's descriptor, as CLIENT LIST's `fd` shows it; -1 where none is known (a
    /// replica's link to its primary, internal clients), as Redis shows its fake clients.
    pub fd: i32,
    pub created: Instant,
    pub name: Mutex<Option<String>>,
    pub lib_name: Mutex<Option<String>>,
    pub lib_ver: Mutex<Option<String>>,
    /// The SELECT index (as the client knows it), for CLIENT LIST.
    pub db: AtomicUsize,
    pub tenant: AtomicUsize,
    pub user: Mutex<Arc<str>>,
    pub resp: AtomicU8,
    /// Unix milliseconds of the last command.
    pub last_active_ms: AtomicU64,
    pub last_cmd: Mutex<&'static str>,
    /// Queued commands in MULTI, or -1 outside MULTI.
    pub multi_len: std::sync::atomic::AtomicI64,
    pub watch_count: AtomicUsize,
    /// CLIENT DURABILITY override for CLIENT LIST/INFO: 0 = default, else 1 + degree index.
    pub durability: AtomicU8,
    /// CLIENT LIST `redir`: the connection tracking keys' redirect target, 0 when it tracks
    /// without one, -1 when it does not track (as Redis shows it).
    pub tracking_redirect: std::sync::atomic::AtomicI64,
    /// It tracks in BCAST mode (CLIENT LIST flag `B`).
    pub tracking_bcast: AtomicBool,
    /// The BCAST prefixes it tracks (counted in `tot-mem`, as Redis counts its prefix tree).
    pub tracking_prefixes: AtomicUsize,
    /// An invalidation found its redirect target gone (CLIENT LIST flag `R`; see `tracking`).
    pub tracking_broken: AtomicBool,
    /// CLIENT NO-EVICT on (CLIENT LIST flag `e`): never closed by `maxmemory-clients`.
    pub no_evict: AtomicBool,
    /// CLIENT NO-TOUCH on (flag `T`): its commands leave keys' LRU/LFU data alone, except
    /// TOUCH (the dispatcher runs them under `gradus_store::with_touch(false, …)`).
    pub no_touch: AtomicBool,
    /// Subscriptions to channels, patterns and shard channels (CLIENT LIST sub, psub, ssub).
    pub subs: [AtomicUsize; 3],
    /// Waiting in a blocking command (BLPOP, XREAD BLOCK, WAIT …), or a MONITOR: never closed
    /// for being idle (`timeout`), as in Redis.
    pub blocked: AtomicBool,
    pub monitoring: AtomicBool,
    /// A memcached connection: Redis' `timeout` is not for it.
    pub memcached: AtomicBool,
    /// The connection's buffers as CLIENT LIST shows them (qbuf, argv-mem …).
    pub mem: ConnectionMemory,
    /// A [`ClientRole`] (set by the replication link; [`ClientHandle::set_role`]).
    role: AtomicU8,
    /// The connection's outbox, so others can reach it by id (a tracking redirect target);
    /// emptied when the connection closes (the outbox points back at this handle).
    outbox: Mutex<Option<Arc<crate::pubsub::Outbox>>>,
    outbox_closed: AtomicBool,
    killed: AtomicBool,
    kill_notify: Notify,
    /// The connection's task while it waits between batches (see [`ClientHandle::attention`]):
    /// woken by a kill, a message pushed to it, and the server shutting down.
    attention: AtomicWaker,
}

impl ClientHandle {
    pub fn new(id: u64, addr: SocketAddr, laddr: SocketAddr) -> Self {
        Self {
            id,
            addr,
            laddr,
            fd: -1,
            created: Instant::now(),
            name: Mutex::new(None),
            lib_name: Mutex::new(None),
            lib_ver: Mutex::new(None),
            db: AtomicUsize::new(0),
            tenant: AtomicUsize::new(0),
            user: Mutex::new(Arc::from("default")),
            resp: AtomicU8::new(2),
            last_active_ms: AtomicU64::new(gradus_store::now_ms()),
            last_cmd: Mutex::new("NULL"),
            multi_len: std::sync::atomic::AtomicI64::new(-1),
            watch_count: AtomicUsize::new(0),
            durability: AtomicU8::new(0),
            subs: Default::default(),
            blocked: AtomicBool::new(false),
            monitoring: AtomicBool::new(false),
            memcached: AtomicBool::new(false),
            mem: ConnectionMemory::default(),
            tracking_redirect: std::sync::atomic::AtomicI64::new(-1),
            tracking_bcast: AtomicBool::new(false),
            tracking_prefixes: AtomicUsize::new(0),
            tracking_broken: AtomicBool::new(false),
            no_evict: AtomicBool::new(false),
            no_touch: AtomicBool::new(false),
            role: AtomicU8::new(ClientRole::Normal as u8),
            outbox: Mutex::new(None),
            outbox_closed: AtomicBool::new(false),
            killed: AtomicBool::new(false),
            kill_notify: Notify::new(),
            attention: AtomicWaker::new(),
        }
    }

    /// Record that a command is running at `now_ms` (Unix ms).
    pub fn touch(&self, cmd: &'static str, now_ms: u64) {
        self.last_active_ms.store(now_ms, Ordering::Relaxed);
        *self.last_cmd.lock() = cmd;
    }

    /// The connection's outbox (made on first use; none once the connection has closed).
    pub fn outbox(self: &Arc<Self>) -> Option<Arc<crate::pubsub::Outbox>> {
        let mut slot = self.outbox.lock();
        if self.outbox_closed.load(Ordering::Relaxed) {
            return None;
        }
        Some(
            slot.get_or_insert_with(|| Arc::new(crate::pubsub::Outbox::new(self.clone())))
                .clone(),
        )
    }

    /// Drop the outbox (the connection has closed): what was queued is discarded.
    pub fn close_outbox(&self) {
        let mut slot = self.outbox.lock();
        self.outbox_closed.store(true, Ordering::Relaxed);
        if let Some(outbox) = slot.take() {
            outbox.close();
        }
    }

    /// True while the connection listens to any channel (Redis' `pubsub` client type).
    pub fn is_pubsub(&self) -> bool {
        self.subs.iter().any(|n| n.load(Ordering::Relaxed) > 0)
    }

    /// The connection's role (a replica's or primary's link, or a plain client).
    pub fn role(&self) -> ClientRole {
        match self.role.load(Ordering::Relaxed) {
            1 => ClientRole::Replica,
            2 => ClientRole::Master,
            _ => ClientRole::Normal,
        }
    }

    /// Mark the connection as a replica's or a primary's link (or a plain client again).
    pub fn set_role(&self, role: ClientRole) {
        self.role.store(role as u8, Ordering::Relaxed);
    }

    /// Its Redis client type: the role first, then `pubsub` while it listens to a channel.
    pub fn client_type(&self) -> ClientType {
        match self.role() {
            ClientRole::Master => ClientType::Master,
            ClientRole::Replica => ClientType::Replica,
            ClientRole::Normal if self.is_pubsub() => ClientType::Pubsub,
            ClientRole::Normal => ClientType::Normal,
        }
    }

    /// CLIENT LIST's `flags=`, in Redis' order (`S` replica, `M` primary, `P` pub/sub, `x` MULTI,
    /// client-side caching's, `e` no-evict, `T` no-touch; `N` for none).
    pub fn flags(&self) -> String {
        let mut flags = String::new();
        match self.role() {
            ClientRole::Replica => flags.push('S'),
            ClientRole::Master => flags.push('M'),
            ClientRole::Normal => {}
        }
        if self.is_pubsub() {
            flags.push('P');
        }
        if self.multi_len.load(Ordering::Relaxed) >= 0 {
            flags.push('x');
        }
        // Client-side caching: t(racking), R (broken redirect), B(CAST), as Redis shows them.
        if self.tracking_redirect.load(Ordering::Relaxed) >= 0 {
            flags.push('t');
            if self.tracking_broken.load(Ordering::Relaxed) {
                flags.push('R');
            }
            if self.tracking_bcast.load(Ordering::Relaxed) {
                flags.push('B');
            }
        }
        if self.no_evict.load(Ordering::Relaxed) {
            flags.push('e');
        }
        if self.no_touch.load(Ordering::Relaxed) {
            flags.push('T');
        }
        if flags.is_empty() {
            flags.push('N');
        }
        flags
    }

    /// Ask the connection to close (CLIENT KILL, shutdown).
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Release);
        self.kill_notify.notify_one();
        self.attention.wake();
    }

    /// Wake the connection if it waits between batches ([`ClientHandle::attention`]) so that
    /// it looks again at what it waits for (a pushed message, the server shutting down).
    pub fn wake(&self) {
        self.attention.wake();
    }

    /// Resolves once `ready()` is true, looked at when first polled and after each
    /// [`ClientHandle::wake`] or [`ClientHandle::kill`]. The connection waits on this beside
    /// its socket between batches: registering costs no lock and no waiter list, where a
    /// `Notify` for each cause (a kill, a push, shutdown) cost a locked registration and
    /// removal each per request.
    pub fn attention<'a>(&'a self, ready: impl Fn() -> bool + 'a) -> impl Future<Output = ()> + 'a {
        std::future::poll_fn(move |cx| {
            // Registered before looking, so a wake after the look is not lost.
            self.attention.register(cx.waker());
            if ready() {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
    }

    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    /// Resolves once `kill` was called.
    pub async fn killed(&self) {
        loop {
            if self.is_killed() {
                return;
            }
            self.kill_notify.notified().await;
        }
    }

    /// The bytes its input holds (the read buffer and the arguments decoded) and its output
    /// waiting to be written (replies and what others pushed), for INFO clients'
    /// `client_recent_max_input_buffer` / `client_recent_max_output_buffer`, which Redis
    /// reckons the same way (`clientsCronTrackExpansiveClients`).
    pub fn buffer_bytes(&self) -> (usize, usize) {
        let mem = &self.mem;
        let load = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        let pushed = self.outbox.lock().as_ref().map_or(0, |o| o.pending());
        (
            load(&mem.qbuf) + load(&mem.qbuf_free) + load(&mem.argv),
            load(&mem.reply_pending) + pushed,
        )
    }

    /// CLIENT LIST's `tot-mem`: the connection's state and buffers (read, arguments, queued
    /// commands, reply, what others pushed to it) and its watched keys, subscriptions and
    /// tracking prefixes, as near as they can be measured; what `maxmemory-clients` counts.
    pub fn memory(&self) -> usize {
        /// What one watched key, subscription or tracking prefix costs the connection beyond
        /// its bytes (an entry in its list or set), as Redis counts a list node and its
        /// `watchedKey`, a dictionary entry, or prefix-tree nodes.
        const ENTRY: usize = 56;
        let mem = &self.mem;
        let load = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        let omem = self.outbox.lock().as_ref().map_or(0, |o| o.pending());
        let entries = load(&self.watch_count)
            + self.subs.iter().map(load).sum::<usize>()
            + load(&self.tracking_prefixes);
        std::mem::size_of::<ClientState>()
            + std::mem::size_of::<ClientHandle>()
            + load(&mem.qbuf)
            + load(&mem.qbuf_free)
            + load(&mem.argv)
            + load(&mem.multi)
            + load(&mem.reply_size)
            + omem
            + entries * ENTRY
    }

    /// One line of CLIENT LIST / the CLIENT INFO reply, in Redis' field order.
    pub fn describe(&self) -> String {
        let age = self.created.elapsed().as_secs();
        let idle_ms =
            gradus_store::now_ms().saturating_sub(self.last_active_ms.load(Ordering::Relaxed));
        let name = self.name.lock().clone().unwrap_or_default();
        let lib_name = self.lib_name.lock().clone().unwrap_or_default();
        let lib_ver = self.lib_ver.lock().clone().unwrap_or_default();
        let multi = self.multi_len.load(Ordering::Relaxed);
        let subs: Vec<usize> = self
            .subs
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .collect();
        let flags = self.flags();
        let redir = self.tracking_redirect.load(Ordering::Relaxed);
        let durability = match self.durability.load(Ordering::Relaxed) {
            0 => "default",
            n => gradus_log::Durability::ALL
                [(n as usize - 1).min(gradus_log::Durability::ALL.len() - 1)]
            .as_str(),
        };
        let mem = &self.mem;
        let load = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        // `oll`/`omem`: what others pushed (messages, invalidations) and is not written yet.
        let (oll, omem) = self
            .outbox
            .lock()
            .as_ref()
            .map_or((0, 0), |o| (o.queued_len(), o.pending()));
        let (qbuf, qbuf_free, argv, multi_mem) = (
            load(&mem.qbuf),
            load(&mem.qbuf_free),
            load(&mem.argv),
            load(&mem.multi),
        );
        let (rbs, rbp, obl) = (
            load(&mem.reply_size),
            load(&mem.reply_peak),
            load(&mem.reply_pending),
        );
        let tot_mem = self.memory();
        format!(
            "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={} db={} sub={} psub={} ssub={} multi={} qbuf={qbuf} qbuf-free={qbuf_free} argv-mem={argv} multi-mem={multi_mem} rbs={rbs} rbp={rbp} obl={obl} oll={oll} omem={omem} tot-mem={tot_mem} events=r cmd={} user={} redir={redir} resp={} lib-name={} lib-ver={} durability={}",
            self.id,
            self.addr,
            self.laddr,
            self.fd,
            name,
            age,
            idle_ms / 1000,
            flags,
            self.db.load(Ordering::Relaxed),
            subs[0],
            subs[1],
            subs[2],
            multi,
            self.last_cmd.lock(),
            self.user.lock(),
            self.resp.load(Ordering::Relaxed),
            lib_name,
            lib_ver,
            durability
        )
    }
}

/// Every live connection, by id.
pub struct ClientRegistry {
    next_id: AtomicU64,
    clients: Mutex<BTreeMap<u64, Arc<ClientHandle>>>,
}

impl Default for ClientRegistry {
    fn default() -> Self {
        Self {
            next_id: AtomicU64::new(1),
            clients: Mutex::new(BTreeMap::new()),
        }
    }
}

impl ClientRegistry {
    /// Register a new connection on socket `fd` (-1: none known) and return its handle.
    pub fn register(&self, addr: SocketAddr, laddr: SocketAddr, fd: i32) -> Arc<ClientHandle> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let handle = Arc::new(ClientHandle {
            fd,
            ..ClientHandle::new(id, addr, laddr)
        });
        self.clients.lock().insert(id, handle.clone());
        handle
    }

    pub fn unregister(&self, id: u64) {
        self.clients.lock().remove(&id);
    }

    pub fn len(&self) -> usize {
        self.clients.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A snapshot of all handles, in id order.
    pub fn all(&self) -> Vec<Arc<ClientHandle>> {
        self.clients.lock().values().cloned().collect()
    }

    pub fn get(&self, id: u64) -> Option<Arc<ClientHandle>> {
        self.clients.lock().get(&id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn handle() -> Arc<ClientHandle> {
        let addr: SocketAddr = "127.0.0.1:1".parse().expect("address");
        Arc::new(ClientHandle::new(1, addr, addr))
    }

    /// A connection waiting between batches is woken by a kill, and by `wake` once what it
    /// waits for holds (a pushed message, shutdown); a wake with nothing to see leaves it
    /// waiting.
    #[tokio::test]
    async fn attention_is_woken_by_kill_and_wake() {
        let h = handle();
        let waiter = {
            let h = h.clone();
            tokio::spawn(async move { h.attention(|| h.is_killed()).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        h.kill();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("a kill wakes the waiting connection")
            .expect("task");

        let h = handle();
        let flag = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (h, flag) = (h.clone(), flag.clone());
            tokio::spawn(async move { h.attention(|| flag.load(Ordering::Acquire)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        h.wake();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "a wake with nothing to see");
        flag.store(true, Ordering::Release);
        h.wake();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("a wake after the condition holds wakes it")
            .expect("task");
    }
}
