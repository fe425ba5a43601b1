//! Server-assisted client-side caching (Redis' `CLIENT TRACKING`): which connections may hold
//! which keys in a local cache, and the invalidation messages sent when those keys change.
//!
//! Two modes, as in Redis. Default (with OPTIN/OPTOUT variants): a read by a tracking connection
//! remembers its keys in a table `(tenant, key) → connection ids`; the next write of a key sends
//! `invalidate` to each of them and forgets the entry. BCAST: no table; a write of a key under
//! one of a connection's prefixes sends it `invalidate`, batched as Redis batches them until
//! `beforeSleep`: the keys a command wrote (all of EXEC's or a script's) are collected in a
//! [`Written`] list and sent when it has finished, one message per (prefix, connection), its
//! keys sorted and without repeats. The table is bounded by
//! `tracking-table-max-keys`: past it the oldest keys are invalidated and forgotten. A flush
//! sends `invalidate` with a null key list to every tracking connection of the tenant.
//!
//! Keys are per tenant (Redis' table ignores the database number, so does this one within a
//! tenant): a tenant's write never invalidates another tenant's cache.
//!
//! Delivery goes through the receiving connection's outbox ([`crate::pubsub::Outbox`]): RESP3
//! connections get a `>2 invalidate [keys]` push; a RESP2 connection receives invalidations
//! only as the redirect target of another connection, as a message on `__redis__:invalidate`,
//! and only while it is subscribed (Redis sends nothing otherwise).
//!
//! Locks: the table and the registry are short mutexes, never held across an `.await` and never
//! held while an outbox is written to.
//!
//! May import: `pubsub` (outboxes), `client` (handles); no command handlers.

use crate::pubsub::Outbox;
use bytes::Bytes;
use gradus_proto::{Frame, ProtocolVersion};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// What `CLIENT TRACKING on …` asked for.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Deliver to this connection instead (0: none).
    pub redirect: u64,
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    pub prefixes: Vec<Bytes>,
}

/// A tracking connection, as the table sees it.
struct Tracker {
    tenant: usize,
    /// Where its invalidations go: its own outbox, or its redirect target's.
    target: Arc<Outbox>,
    /// Its own outbox (told when its redirect target is gone).
    own: Arc<Outbox>,
    options: Options,
}

impl Tracker {
    /// Where an invalidation for this tracker goes: its target, or, when its redirect target
    /// has closed, its own outbox with Redis' `tracking-redir-broken` push instead (RESP3
    /// only; a RESP2 connection is told nothing, as in Redis).
    fn route(&self, keys: Option<Vec<Bytes>>) -> Option<(Arc<Outbox>, Message)> {
        if self.options.redirect != 0 && self.target.is_closed() {
            // Redis' CLIENT_TRACKING_BROKEN_REDIR, set when a message finds no target (CLIENT
            // LIST flag `R`, TRACKINGINFO `broken_redirect`).
            self.own
                .handle
                .tracking_broken
                .store(true, Ordering::Relaxed);
            (self.own.resp() == ProtocolVersion::Resp3).then(|| {
                (
                    self.own.clone(),
                    Message::RedirBroken(self.options.redirect),
                )
            })
        } else {
            Some((self.target.clone(), Message::Invalidate(keys)))
        }
    }
}

/// INFO's tracking figures, as Redis names them: `tracking_total_keys` (keys remembered),
/// `tracking_total_items` (connection ids over them), `tracking_total_prefixes` (distinct BCAST
/// prefixes, the empty one included) and `tracking_clients`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub keys: usize,
    pub items: usize,
    pub prefixes: usize,
    pub clients: usize,
}

/// A key written while a command runs, kept for the BCAST invalidations sent once it has
/// finished (see [`Tracking::broadcast`]).
#[derive(Debug, Clone)]
pub struct Written {
    tenant: usize,
    key: Bytes,
    /// The connection that wrote it (0: none), not told of it if it asked NOLOOP.
    by: u64,
}

/// What a tracker is sent.
enum Message {
    /// `invalidate` with these keys (None: a flush).
    Invalidate(Option<Vec<Bytes>>),
    /// `tracking-redir-broken` with the redirect target's id.
    RedirBroken(u64),
}

#[derive(Default)]
struct Table {
    /// (tenant, key) → ids of the connections that may cache it.
    keys: hashbrown::HashMap<(usize, Bytes), hashbrown::HashSet<u64>>,
    /// Keys in the order they were first remembered (for the bound; may name forgotten keys).
    order: VecDeque<(usize, Bytes)>,
}

impl Table {
    /// Take the oldest keys beyond `max_keys` (0: no bound) out of the table.
    fn over(&mut self, max_keys: usize) -> Vec<((usize, Bytes), hashbrown::HashSet<u64>)> {
        let mut evicted = Vec::new();
        while max_keys > 0 && self.keys.len() > max_keys {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(ids) = self.keys.remove(&oldest) {
                evicted.push((oldest, ids));
            }
        }
        if self.order.len() > 2 * self.keys.len() + 1024 {
            // Forgotten keys pile up in `order`: rebuild it from what is remembered.
            let Table { keys, order } = self;
            order.retain(|k| keys.contains_key(k));
        }
        evicted
    }
}

/// Every tracking connection and the keys they may cache.
#[derive(Default)]
pub struct Tracking {
    trackers: Mutex<hashbrown::HashMap<u64, Tracker>>,
    table: Mutex<Table>,
    /// Tracking connections in all: zero means writes skip this module entirely.
    active: AtomicUsize,
    /// BCAST connections among them: zero means writes collect no [`Written`] keys.
    bcast: AtomicUsize,
    /// Keys in the table (set under its lock after each change; read by [`Tracking::is_active`]).
    remembered: AtomicUsize,
}

/// The message a write of `keys` (None: a flush) sends to `target`, in its protocol, or None
/// when it cannot receive one (RESP2 and not subscribed).
fn invalidation(target: &Outbox, keys: Option<&[Bytes]>) -> Option<Bytes> {
    let list = match keys {
        Some(keys) => Frame::Array(keys.iter().cloned().map(Frame::Bulk).collect()),
        // Redis sends its null reply: `_` in RESP3, the null bulk `$-1` in RESP2 (not `*-1`).
        None => Frame::Null,
    };
    let frame = match target.resp() {
        ProtocolVersion::Resp3 => Frame::Push(vec![Frame::bulk_from_str("invalidate"), list]),
        ProtocolVersion::Resp2 if target.handle.is_pubsub() => Frame::Push(vec![
            Frame::bulk_from_str("message"),
            Frame::bulk_from_str("__redis__:invalidate"),
            list,
        ]),
        ProtocolVersion::Resp2 => return None,
    };
    Some(crate::pubsub::encode_for(&frame, target.resp()))
}

/// Queue an invalidation for `target` and wake it; when `target` is connection `by` (the one
/// running the command), hand the message back instead, for after its reply.
fn deliver(target: &Outbox, by: u64, keys: Option<&[Bytes]>) -> Option<Bytes> {
    let msg = invalidation(target, keys)?;
    push_or_return(target, by, msg)
}

/// [`deliver`] for a [`Message`].
fn deliver_message(target: &Outbox, by: u64, message: &Message) -> Option<Bytes> {
    match message {
        Message::Invalidate(keys) => deliver(target, by, keys.as_deref()),
        Message::RedirBroken(id) => {
            let frame = Frame::Push(vec![
                Frame::bulk_from_str("tracking-redir-broken"),
                Frame::Integer(*id as i64),
            ]);
            let msg = crate::pubsub::encode_for(&frame, target.resp());
            push_or_return(target, by, msg)
        }
    }
}

fn push_or_return(target: &Outbox, by: u64, msg: Bytes) -> Option<Bytes> {
    if target.handle.id == by {
        return Some(msg);
    }
    target.push_own(msg);
    target.wake();
    None
}

impl Tracking {
    /// True while any connection tracks, or the table still remembers keys (a cheap check for
    /// the write path). Keys outlive the tracking of the connections that read them, as in
    /// Redis: a write or a flush must still forget them when no one tracks any more, or a
    /// later tracker would be told of a write to a key it never read.
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed) > 0 || self.remembered.load(Ordering::Relaxed) > 0
    }

    /// Turn tracking on for connection `id` (replacing earlier options); its invalidations go
    /// to `target` (its own outbox or its redirect target's).
    pub fn enable(
        &self,
        id: u64,
        tenant: usize,
        target: Arc<Outbox>,
        own: Arc<Outbox>,
        options: Options,
    ) {
        own.handle.tracking_broken.store(false, Ordering::Relaxed);
        let mut trackers = self.trackers.lock();
        if options.bcast {
            self.bcast.fetch_add(1, Ordering::Relaxed);
        }
        let tracker = Tracker {
            tenant,
            target,
            own,
            options,
        };
        match trackers.insert(id, tracker) {
            None => {
                self.active.fetch_add(1, Ordering::Relaxed);
            }
            Some(old) if old.options.bcast => {
                self.bcast.fetch_sub(1, Ordering::Relaxed);
            }
            Some(_) => {}
        }
    }

    /// Turn tracking off for connection `id` (its table entries are dropped lazily).
    pub fn disable(&self, id: u64) {
        if let Some(old) = self.trackers.lock().remove(&id) {
            self.active.fetch_sub(1, Ordering::Relaxed);
            if old.options.bcast {
                self.bcast.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Remember that connection `id` read `keys` of `tenant` (default mode), within `max_keys`
    /// keys in all (0: no bound): the oldest beyond it are invalidated and forgotten.
    ///
    /// Returns what is due to connection `id` itself: Redis writes it after the reply of the
    /// command running now, so the caller queues it after that reply.
    pub fn remember(&self, id: u64, tenant: usize, keys: &[Bytes], max_keys: usize) -> Vec<Bytes> {
        let evicted = {
            let mut table = self.table.lock();
            for key in keys {
                let entry = (tenant, key.clone());
                let ids = table.keys.entry(entry.clone()).or_default();
                let new_key = ids.is_empty();
                ids.insert(id);
                if new_key {
                    table.order.push_back(entry);
                }
            }
            let evicted = table.over(max_keys);
            self.remembered.store(table.keys.len(), Ordering::Relaxed);
            evicted
        };
        let mut own = Vec::new();
        for ((_, key), ids) in evicted {
            own.extend(self.send(ids, id, false, std::slice::from_ref(&key)));
        }
        own
    }

    /// Invalidate and forget the oldest keys beyond `max_keys` (0: no bound), as Redis'
    /// `trackingLimitUsedSlots` does every event-loop round: a lowered
    /// `tracking-table-max-keys` applies without waiting for the next key read (the expiry
    /// timer calls this each cycle).
    pub fn limit(&self, max_keys: usize) {
        if !self.is_active() {
            return;
        }
        let evicted = {
            let mut table = self.table.lock();
            let evicted = table.over(max_keys);
            self.remembered.store(table.keys.len(), Ordering::Relaxed);
            evicted
        };
        for ((_, key), ids) in evicted {
            let own = self.send(ids, 0, false, std::slice::from_ref(&key));
            debug_assert!(own.is_none(), "no connection has id 0");
        }
    }

    /// `keys` of `tenant` were written by connection `writer` outside any command (an eviction):
    /// [`Tracking::invalidate_batched`] and [`Tracking::broadcast`] at once.
    pub fn invalidate(&self, writer: u64, tenant: usize, keys: &[Bytes]) -> Vec<Bytes> {
        let mut written = Vec::new();
        let mut own = self.invalidate_batched(writer, tenant, keys, &mut written);
        own.extend(self.broadcast(writer, written));
        own
    }

    /// `keys` of `tenant` were written by connection `writer`: invalidate them for everyone
    /// who may cache them (a NOLOOP writer is not told of its own writes). The default-mode
    /// invalidations go now; the BCAST ones are added to `written`, for [`Tracking::broadcast`]
    /// once the command has finished. Returns what is due to the writer itself, for after its
    /// reply (see [`Tracking::remember`]).
    pub fn invalidate_batched(
        &self,
        writer: u64,
        tenant: usize,
        keys: &[Bytes],
        written: &mut Vec<Written>,
    ) -> Vec<Bytes> {
        let mut per_key = Vec::new();
        {
            let mut table = self.table.lock();
            for key in keys {
                if let Some(ids) = table.keys.remove(&(tenant, key.clone())) {
                    per_key.push((key.clone(), ids));
                }
            }
            self.remembered.store(table.keys.len(), Ordering::Relaxed);
        }
        let mut own = Vec::new();
        for (key, ids) in per_key {
            own.extend(self.send(ids, writer, true, std::slice::from_ref(&key)));
        }
        if self.bcast.load(Ordering::Relaxed) > 0 {
            written.extend(keys.iter().map(|key| Written {
                tenant,
                key: key.clone(),
                by: writer,
            }));
        }
        own
    }

    /// The BCAST invalidations of the keys in `written` (Redis'
    /// `trackingBroadcastInvalidationMessages`): for each prefix in byte order, each connection
    /// with it (by id) is sent the keys under it, sorted and once each, less those it wrote
    /// itself if it asked NOLOOP. Returns what is due to connection `by` (the one that ran the
    /// command), for after its reply.
    pub fn broadcast(&self, by: u64, written: Vec<Written>) -> Vec<Bytes> {
        if written.is_empty() {
            return Vec::new();
        }
        let mut sends = Vec::new();
        {
            let trackers = self.trackers.lock();
            // No prefix: the empty one, which covers every key.
            let empty = [Bytes::new()];
            let mut batches: Vec<(&[u8], u64, Vec<Bytes>)> = Vec::new();
            for (&id, t) in trackers.iter().filter(|(_, t)| t.options.bcast) {
                let prefixes = if t.options.prefixes.is_empty() {
                    &empty[..]
                } else {
                    &t.options.prefixes[..]
                };
                for prefix in prefixes {
                    let keys: std::collections::BTreeSet<&Bytes> = written
                        .iter()
                        .filter(|w| {
                            w.tenant == t.tenant
                                && w.key.starts_with(prefix)
                                && !(t.options.noloop && w.by == id)
                        })
                        .map(|w| &w.key)
                        .collect();
                    if !keys.is_empty() {
                        batches.push((prefix, id, keys.into_iter().cloned().collect()));
                    }
                }
            }
            batches.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
            for (_, id, keys) in batches {
                if let Some(t) = trackers.get(&id) {
                    sends.extend(t.route(Some(keys)));
                }
            }
        }
        sends
            .into_iter()
            .filter_map(|(target, message)| deliver_message(&target, by, &message))
            .collect()
    }

    /// Send `invalidate keys` to the connections `ids`; `by` is the connection running the
    /// command (skipped if `by_writes` and it asked NOLOOP; its own message is returned).
    fn send(
        &self,
        ids: hashbrown::HashSet<u64>,
        by: u64,
        by_writes: bool,
        keys: &[Bytes],
    ) -> Option<Bytes> {
        let targets: Vec<(Arc<Outbox>, Message)> = {
            let trackers = self.trackers.lock();
            ids.iter()
                .filter_map(|id| {
                    let t = trackers.get(id)?;
                    if t.options.bcast || (by_writes && t.options.noloop && *id == by) {
                        return None;
                    }
                    t.route(Some(keys.to_vec()))
                })
                .collect()
        };
        let mut own = None;
        for (target, message) in targets {
            own = own.or(deliver_message(&target, by, &message));
        }
        own
    }

    /// A flush of `tenant` by connection `by`: every tracking connection of it drops its whole
    /// cache. Returns what is due to `by` itself, for after its reply (Redis sends the flushing
    /// connection's own null invalidation after its `+OK`).
    pub fn flush(&self, tenant: usize, by: u64) -> Vec<Bytes> {
        let targets: Vec<(Arc<Outbox>, Message)> = {
            let trackers = self.trackers.lock();
            trackers
                .values()
                .filter(|t| t.tenant == tenant)
                .filter_map(|t| t.route(None))
                .collect()
        };
        {
            let mut table = self.table.lock();
            table.keys.retain(|(t, _), _| *t != tenant);
            self.remembered.store(table.keys.len(), Ordering::Relaxed);
        }
        targets
            .into_iter()
            .filter_map(|(target, message)| deliver_message(&target, by, &message))
            .collect()
    }

    /// INFO's tracking figures (see [`Stats`]).
    pub fn stats(&self) -> Stats {
        let (keys, items) = {
            let table = self.table.lock();
            let items = table.keys.values().map(|ids| ids.len()).sum();
            (table.keys.len(), items)
        };
        let trackers = self.trackers.lock();
        let mut prefixes: hashbrown::HashSet<&[u8]> = hashbrown::HashSet::new();
        for t in trackers.values().filter(|t| t.options.bcast) {
            if t.options.prefixes.is_empty() {
                prefixes.insert(b"");
            }
            prefixes.extend(t.options.prefixes.iter().map(|p| &p[..]));
        }
        Stats {
            keys,
            items,
            prefixes: prefixes.len(),
            clients: trackers.len(),
        }
    }

    /// Connection `id`'s tracking state for CLIENT TRACKINGINFO: its options, and whether its
    /// redirect target is gone.
    pub fn options(&self, id: u64) -> Option<(Options, bool)> {
        self.trackers.lock().get(&id).map(|t| {
            (
                t.options.clone(),
                t.own.handle.tracking_broken.load(Ordering::Relaxed),
            )
        })
    }
}
