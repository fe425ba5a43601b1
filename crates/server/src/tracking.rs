//! Server-assisted client-side caching (Redis' `CLIENT TRACKING`): which connections may hold
//! which keys in a local cache, and the invalidation messages sent when those keys change.
//!
//! Two modes, as in Redis. Default (with OPTIN/OPTOUT variants): a read by a tracking connection
//! remembers its keys in a table `(tenant, key) → connection ids`; the next write of a key sends
//! `invalidate` to each of them and forgets the entry. BCAST: no table; a write of a key under
//! one of a connection's prefixes sends it `invalidate`. The table is bounded by
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

/// Every tracking connection and the keys they may cache.
#[derive(Default)]
pub struct Tracking {
    trackers: Mutex<hashbrown::HashMap<u64, Tracker>>,
    table: Mutex<Table>,
    /// Tracking connections in all: zero means writes skip this module entirely.
    active: AtomicUsize,
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
    /// True while any connection tracks (a cheap check for the write path).
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed) > 0
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
        if trackers
            .insert(
                id,
                Tracker {
                    tenant,
                    target,
                    own,
                    options,
                },
            )
            .is_none()
        {
            self.active.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Turn tracking off for connection `id` (its table entries are dropped lazily).
    pub fn disable(&self, id: u64) {
        if self.trackers.lock().remove(&id).is_some() {
            self.active.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Remember that connection `id` read `keys` of `tenant` (default mode), within `max_keys`
    /// keys in all (0: no bound): the oldest beyond it are invalidated and forgotten.
    ///
    /// Returns what is due to connection `id` itself: Redis writes it after the reply of the
    /// command running now, so the caller queues it after that reply.
    pub fn remember(&self, id: u64, tenant: usize, keys: &[Bytes], max_keys: usize) -> Vec<Bytes> {
        let mut evicted = Vec::new();
        {
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
            while max_keys > 0 && table.keys.len() > max_keys {
                let Some(oldest) = table.order.pop_front() else {
                    break;
                };
                if let Some(ids) = table.keys.remove(&oldest) {
                    evicted.push((oldest, ids));
                }
            }
            if table.order.len() > 2 * table.keys.len() + 1024 {
                // Forgotten keys pile up in `order`: rebuild it from what is remembered.
                let Table { keys, order } = &mut *table;
                order.retain(|k| keys.contains_key(k));
            }
        }
        let mut own = Vec::new();
        for ((_, key), ids) in evicted {
            own.extend(self.send(ids, id, false, std::slice::from_ref(&key)));
        }
        own
    }

    /// `keys` of `tenant` were written by connection `writer`: invalidate them for everyone
    /// who may cache them (a NOLOOP writer is not told of its own writes). Returns what is due
    /// to the writer itself, for after its reply (see [`Tracking::remember`]).
    pub fn invalidate(&self, writer: u64, tenant: usize, keys: &[Bytes]) -> Vec<Bytes> {
        let mut per_key = Vec::new();
        {
            let mut table = self.table.lock();
            for key in keys {
                if let Some(ids) = table.keys.remove(&(tenant, key.clone())) {
                    per_key.push((key.clone(), ids));
                }
            }
        }
        let mut own = Vec::new();
        for (key, ids) in per_key {
            own.extend(self.send(ids, writer, true, std::slice::from_ref(&key)));
        }
        own.extend(self.broadcast(writer, tenant, keys));
        own
    }

    /// BCAST connections whose prefixes cover any of `keys`.
    fn broadcast(&self, writer: u64, tenant: usize, keys: &[Bytes]) -> Vec<Bytes> {
        let mut sends = Vec::new();
        {
            let trackers = self.trackers.lock();
            for (&id, t) in trackers.iter() {
                if !t.options.bcast || t.tenant != tenant || (t.options.noloop && id == writer) {
                    continue;
                }
                let matching: Vec<Bytes> = keys
                    .iter()
                    .filter(|k| {
                        t.options.prefixes.is_empty()
                            || t.options.prefixes.iter().any(|p| k.starts_with(p))
                    })
                    .cloned()
                    .collect();
                if !matching.is_empty() {
                    sends.extend(t.route(Some(matching)));
                }
            }
        }
        let mut own = Vec::new();
        for (target, message) in sends {
            own.extend(deliver_message(&target, writer, &message));
        }
        own
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
        }
        targets
            .into_iter()
            .filter_map(|(target, message)| deliver_message(&target, by, &message))
            .collect()
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
