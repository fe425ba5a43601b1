//! Pub/sub delivery: who listens to which channel ([`PubSub`]), and each connection's bounded
//! queue of out-of-band messages ([`Outbox`]).
//!
//! Channels are scoped by tenant: a channel's key is `(tenant, name)`, so a tenant never hears
//! another tenant's messages (keyspace notifications and invalidations go through the same
//! tables). Only introspection (`PUBSUB CHANNELS` & co. for an admin) looks across tenants.
//!
//! Delivery never blocks a publisher: `PUBLISH` builds each message once per protocol version as
//! shared [`Bytes`] and appends a reference to every subscriber's [`Outbox`] (a short mutex, never
//! held across an `.await`), then wakes the subscriber's connection task, which copies what is
//! queued into its socket buffer between requests. A subscriber that does not read is bounded by
//! Redis' `client-output-buffer-limit` for its class (hard limit at once, soft limit after its
//! seconds): past it the queue is dropped and the connection closed, so memory never grows
//! without bound.
//!
//! Locks: the channel and pattern tables are `RwLock`s (publishers read, (un)subscribers write);
//! an outbox's queue is its own mutex. A publisher holds a table's read lock while it appends to
//! outboxes; nothing here is ever held across an `.await`.
//!
//! May import: `client` (the handle it closes), `gradus-proto` (encoding), `gradus-store` (glob
//! matching); no command handlers.

use crate::client::ClientHandle;
use bytes::{BufMut, Bytes, BytesMut};
use gradus_proto::{encode, Frame, ProtocolVersion};
use parking_lot::{Mutex, RwLock};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

/// Redis' client classes for `client-output-buffer-limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitClass {
    Normal = 0,
    Replica = 1,
    Pubsub = 2,
}

impl LimitClass {
    /// The names Redis uses in the setting (`slave` is shown; `replica` is accepted).
    pub const NAMES: [&'static str; 3] = ["normal", "slave", "pubsub"];

    fn parse(word: &str) -> Option<LimitClass> {
        match word.to_ascii_lowercase().as_str() {
            "normal" => Some(LimitClass::Normal),
            "slave" | "replica" => Some(LimitClass::Replica),
            "pubsub" => Some(LimitClass::Pubsub),
            _ => None,
        }
    }
}

/// One class's limits: bytes (0 = none) and the seconds the soft limit may be exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassLimits {
    pub hard: u64,
    pub soft: u64,
    pub soft_seconds: u64,
}

/// Parse a `client-output-buffer-limit` value (`<class> <hard> <soft> <seconds>` repeated, sizes
/// with Redis' units) into the classes it names, with Redis' error texts.
pub fn parse_output_limits(text: &str) -> Result<Vec<(LimitClass, ClassLimits)>, String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.is_empty() || !words.len().is_multiple_of(4) {
        return Err("Wrong number of arguments in buffer limit configuration.".into());
    }
    let mut out = Vec::new();
    for group in words.chunks_exact(4) {
        let class = LimitClass::parse(group[0])
            .ok_or("Invalid client class specified in buffer limit configuration.")?;
        let size = |w: &str| crate::tenancy::parse_size(w).map(|n| n as u64);
        let (Some(hard), Some(soft)) = (size(group[1]), size(group[2])) else {
            return Err(
                "Error in hard, soft or soft_seconds setting in buffer limit configuration.".into(),
            );
        };
        let soft_seconds = group[3].parse::<u64>().map_err(|_| {
            "Error in hard, soft or soft_seconds setting in buffer limit configuration."
        })?;
        out.push((
            class,
            ClassLimits {
                hard,
                soft,
                soft_seconds,
            },
        ));
    }
    Ok(out)
}

/// The limits in force for the three classes, read by publishers without a lock.
pub struct OutputLimits {
    classes: [[AtomicU64; 3]; 3],
}

impl Default for OutputLimits {
    /// Redis' defaults: `normal 0 0 0 slave 256mb 64mb 60 pubsub 32mb 8mb 60`.
    fn default() -> Self {
        let limits = Self {
            classes: Default::default(),
        };
        limits.apply("normal 0 0 0 slave 256mb 64mb 60 pubsub 32mb 8mb 60");
        limits
    }
}

impl OutputLimits {
    pub fn get(&self, class: LimitClass) -> ClassLimits {
        let c = &self.classes[class as usize];
        ClassLimits {
            hard: c[0].load(Ordering::Relaxed),
            soft: c[1].load(Ordering::Relaxed),
            soft_seconds: c[2].load(Ordering::Relaxed),
        }
    }

    pub fn set(&self, class: LimitClass, limits: ClassLimits) {
        let c = &self.classes[class as usize];
        c[0].store(limits.hard, Ordering::Relaxed);
        c[1].store(limits.soft, Ordering::Relaxed);
        c[2].store(limits.soft_seconds, Ordering::Relaxed);
    }

    /// Apply a setting's text: the classes it names change, the others keep their limits.
    pub fn apply(&self, text: &str) {
        if let Ok(classes) = parse_output_limits(text) {
            for (class, limits) in classes {
                self.set(class, limits);
            }
        }
    }

    /// As `CONFIG GET client-output-buffer-limit` shows it: every class, in bytes.
    pub fn text(&self) -> String {
        let classes = [LimitClass::Normal, LimitClass::Replica, LimitClass::Pubsub];
        classes
            .iter()
            .zip(LimitClass::NAMES)
            .map(|(&class, name)| {
                let l = self.get(class);
                format!("{name} {} {} {}", l.hard, l.soft, l.soft_seconds)
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A connection's queue of messages pushed to it by others (pub/sub messages, keyspace
/// notifications, invalidations, MONITOR lines), with the wake-up its task waits on.
pub struct Outbox {
    pub handle: Arc<ClientHandle>,
    queue: Mutex<VecDeque<Bytes>>,
    /// Bytes queued or taken for writing and not yet written (what the limits bound).
    pending: AtomicUsize,
    /// Unix ms since which `pending` has been over the soft limit; 0 = it is not.
    soft_since_ms: AtomicU64,
    /// The class whose limits apply ([`LimitClass`] as u8).
    class: AtomicU8,
    closed: AtomicBool,
    /// Something is queued (checked before taking the queue's lock).
    queued: AtomicBool,
}

impl Outbox {
    pub fn new(handle: Arc<ClientHandle>) -> Self {
        Self {
            handle,
            queue: Mutex::new(VecDeque::new()),
            pending: AtomicUsize::new(0),
            soft_since_ms: AtomicU64::new(0),
            class: AtomicU8::new(LimitClass::Normal as u8),
            closed: AtomicBool::new(false),
            queued: AtomicBool::new(false),
        }
    }

    /// The protocol the connection speaks now (HELLO may change it).
    pub fn resp(&self) -> ProtocolVersion {
        if self.handle.resp.load(Ordering::Relaxed) == 3 {
            ProtocolVersion::Resp3
        } else {
            ProtocolVersion::Resp2
        }
    }

    pub fn set_class(&self, class: LimitClass) {
        self.class.store(class as u8, Ordering::Relaxed);
    }

    fn class(&self) -> LimitClass {
        match self.class.load(Ordering::Relaxed) {
            1 => LimitClass::Replica,
            2 => LimitClass::Pubsub,
            _ => LimitClass::Normal,
        }
    }

    /// Bytes queued and not yet written.
    /// Messages queued and not yet taken for writing (CLIENT LIST `oll`).
    pub fn queued_len(&self) -> usize {
        if !self.queued.load(Ordering::Relaxed) {
            return 0;
        }
        self.queue.lock().len()
    }

    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// Queued messages not yet taken for writing.
    pub fn queued(&self) -> usize {
        self.queue.lock().len()
    }

    /// Queue `msg` for the connection, unless that takes it past its output limits: then the
    /// queue is dropped and the connection closed (Redis' "closed for overcoming of output
    /// buffer limits"). False when the message was not queued.
    pub fn push(&self, msg: Bytes, limits: &OutputLimits) -> bool {
        if self.closed.load(Ordering::Relaxed) {
            return false;
        }
        let len = msg.len();
        let pending = self.pending.fetch_add(len, Ordering::Relaxed) + len;
        if self.over_limits(pending as u64, limits) {
            self.close();
            tracing::warn!(
                client = self.handle.id,
                addr = %self.handle.addr,
                pending,
                "client closed for overcoming of output buffer limits"
            );
            self.handle.kill();
            return false;
        }
        self.queue.lock().push_back(msg);
        self.queued.store(true, Ordering::Release);
        self.handle.wake();
        true
    }

    /// True once the connection has closed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// True when something is queued.
    pub fn has_queued(&self) -> bool {
        self.queued.load(Ordering::Acquire)
    }

    /// Wake the connection (after [`Outbox::push_own`] from another connection).
    pub fn wake(&self) {
        self.handle.wake();
    }

    /// Queue the connection's own reply (a subscription confirmation): it counts towards the
    /// pending bytes but never closes the connection.
    pub fn push_own(&self, msg: Bytes) {
        if self.closed.load(Ordering::Relaxed) {
            return;
        }
        self.pending.fetch_add(msg.len(), Ordering::Relaxed);
        self.queue.lock().push_back(msg);
        self.queued.store(true, Ordering::Release);
    }

    /// Whether `pending` bytes break the class's hard limit, or its soft limit for longer than
    /// its seconds (Redis' `checkClientOutputBufferLimits`).
    fn over_limits(&self, pending: u64, limits: &OutputLimits) -> bool {
        let l = limits.get(self.class());
        if l.hard > 0 && pending >= l.hard {
            return true;
        }
        if l.soft > 0 && pending >= l.soft {
            let now = gradus_store::now_ms();
            let since = self.soft_since_ms.load(Ordering::Relaxed);
            if since == 0 {
                self.soft_since_ms.store(now, Ordering::Relaxed);
                return false;
            }
            return now.saturating_sub(since) / 1000 > l.soft_seconds;
        }
        self.soft_since_ms.store(0, Ordering::Relaxed);
        false
    }

    /// Drop what is queued and refuse more (the connection is closing).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.queue.lock().clear();
        self.queued.store(false, Ordering::Release);
        self.pending.store(0, Ordering::Relaxed);
    }

    /// Move everything queued to the end of `out`; returns the bytes moved, to hand to
    /// [`Outbox::written`] once they are on the socket.
    pub fn drain_into(&self, out: &mut BytesMut) -> usize {
        let mut queue = self.queue.lock();
        self.queued.store(false, Ordering::Release);
        let mut moved = 0;
        for msg in queue.drain(..) {
            moved += msg.len();
            out.extend_from_slice(&msg);
        }
        moved
    }

    /// `n` bytes taken by [`Outbox::drain_into`] reached the socket.
    pub fn written(&self, n: usize) {
        if n > 0 && !self.closed.load(Ordering::Relaxed) {
            let _ = self
                .pending
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| {
                    Some(p.saturating_sub(n))
                });
        }
    }
}

/// Which table a subscription is in: Redis' channels, patterns or shard channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Channel = 0,
    Pattern = 1,
    Shard = 2,
}

impl Kind {
    /// The push message type of a delivery.
    fn message(self) -> &'static [u8] {
        match self {
            Kind::Channel => b"message",
            Kind::Pattern => b"pmessage",
            Kind::Shard => b"smessage",
        }
    }
}

/// Subscribers of one channel (or one pattern), by connection id.
type Subscribers = hashbrown::HashMap<u64, Arc<Outbox>>;
/// A table of channels or patterns: `(tenant, name)` → subscribers.
type Table = RwLock<hashbrown::HashMap<(usize, Bytes), Subscribers>>;

/// Every subscription of every connection, by tenant.
#[derive(Default)]
pub struct PubSub {
    channels: Table,
    patterns: Table,
    shard_channels: Table,
    /// Pattern subscriptions in all, so a publish with none skips the pattern table.
    pattern_count: AtomicUsize,
    /// `client-output-buffer-limit` (the live setting's values).
    pub limits: Arc<OutputLimits>,
}

impl PubSub {
    pub fn new(limits: Arc<OutputLimits>) -> Self {
        Self {
            limits,
            ..Default::default()
        }
    }

    fn table(&self, kind: Kind) -> &Table {
        match kind {
            Kind::Channel => &self.channels,
            Kind::Pattern => &self.patterns,
            Kind::Shard => &self.shard_channels,
        }
    }

    /// Add a subscription; false when the connection already had it.
    pub fn subscribe(&self, kind: Kind, tenant: usize, name: Bytes, outbox: &Arc<Outbox>) -> bool {
        let added = self
            .table(kind)
            .write()
            .entry((tenant, name))
            .or_default()
            .insert(outbox.handle.id, outbox.clone())
            .is_none();
        if added && kind == Kind::Pattern {
            self.pattern_count.fetch_add(1, Ordering::Relaxed);
        }
        added
    }

    /// Remove a subscription; false when the connection did not have it.
    pub fn unsubscribe(&self, kind: Kind, tenant: usize, name: &Bytes, id: u64) -> bool {
        let mut table = self.table(kind).write();
        let key = (tenant, name.clone());
        let Some(subs) = table.get_mut(&key) else {
            return false;
        };
        let removed = subs.remove(&id).is_some();
        if subs.is_empty() {
            table.remove(&key);
        }
        drop(table);
        if removed && kind == Kind::Pattern {
            self.pattern_count.fetch_sub(1, Ordering::Relaxed);
        }
        removed
    }

    /// Deliver `payload` on `channel` of `tenant` to its subscribers (and, for ordinary
    /// channels, to matching patterns); returns how many received it.
    pub fn publish(&self, kind: Kind, tenant: usize, channel: &Bytes, payload: &[u8]) -> usize {
        let mut received = 0;
        {
            let table = self.table(kind).read();
            if let Some(subs) = table.get(&(tenant, channel.clone())) {
                let mut built = Built::default();
                for outbox in subs.values() {
                    let msg = built.get(outbox.resp(), |out| {
                        push_header(3, outbox.resp(), out);
                        bulk(kind.message(), out);
                        bulk(channel, out);
                        bulk(payload, out);
                    });
                    received += outbox.push(msg, &self.limits) as usize;
                }
            }
        }
        if kind == Kind::Channel && self.pattern_count.load(Ordering::Relaxed) > 0 {
            let table = self.patterns.read();
            for ((t, pattern), subs) in table.iter() {
                if *t != tenant || !gradus_store::glob::glob_match(pattern, channel) {
                    continue;
                }
                let mut built = Built::default();
                for outbox in subs.values() {
                    let msg = built.get(outbox.resp(), |out| {
                        push_header(4, outbox.resp(), out);
                        bulk(Kind::Pattern.message(), out);
                        bulk(pattern, out);
                        bulk(channel, out);
                        bulk(payload, out);
                    });
                    received += outbox.push(msg, &self.limits) as usize;
                }
            }
        }
        received
    }

    /// Whether anyone could hear a publish in `tenant` (a cheap check before building keyspace
    /// notifications).
    pub fn anyone_listens(&self, tenant: usize) -> bool {
        self.pattern_count.load(Ordering::Relaxed) > 0
            || self.channels.read().keys().any(|(t, _)| *t == tenant)
    }

    /// Active channels (`kind` Channel or Shard) matching `pattern`, of `tenant` or (None) of all
    /// tenants.
    pub fn channels(
        &self,
        kind: Kind,
        tenant: Option<usize>,
        pattern: Option<&[u8]>,
    ) -> Vec<Bytes> {
        self.table(kind)
            .read()
            .keys()
            .filter(|(t, name)| {
                tenant.is_none_or(|tenant| *t == tenant)
                    && pattern.is_none_or(|p| gradus_store::glob::glob_match(p, name))
            })
            .map(|(_, name)| name.clone())
            .collect()
    }

    /// Subscribers of `channel` in `tenant` (or, None, in every tenant).
    pub fn numsub(&self, kind: Kind, tenant: Option<usize>, channel: &Bytes) -> usize {
        let table = self.table(kind).read();
        match tenant {
            Some(t) => table.get(&(t, channel.clone())).map_or(0, |s| s.len()),
            None => table
                .iter()
                .filter(|((_, name), _)| name == channel)
                .map(|(_, s)| s.len())
                .sum(),
        }
    }

    /// Patterns subscribed to (counted once per pattern, as Redis counts them), in `tenant` or
    /// all.
    pub fn numpat(&self, tenant: Option<usize>) -> usize {
        self.patterns
            .read()
            .keys()
            .filter(|(t, _)| tenant.is_none_or(|tenant| *t == tenant))
            .count()
    }
}

/// One connection's subscriptions (its side of the tables in [`PubSub`]), in its tenant.
#[derive(Default)]
pub struct Subscriptions {
    /// The tenant they were made in (a connection that authenticates into another tenant
    /// loses them: see [`Subscriptions::clear`]).
    pub tenant: usize,
    sets: [hashbrown::HashSet<Bytes>; 3],
}

impl Subscriptions {
    pub fn new(tenant: usize) -> Self {
        Self {
            tenant,
            sets: Default::default(),
        }
    }

    fn set(&mut self, kind: Kind) -> &mut hashbrown::HashSet<Bytes> {
        &mut self.sets[kind as usize]
    }

    /// Add `name`; false when it was there already.
    pub fn insert(&mut self, kind: Kind, name: Bytes) -> bool {
        self.set(kind).insert(name)
    }

    /// Remove `name`; false when it was not there.
    pub fn remove(&mut self, kind: Kind, name: &Bytes) -> bool {
        self.set(kind).remove(name)
    }

    /// The names of one kind.
    pub fn names(&mut self, kind: Kind) -> Vec<Bytes> {
        self.set(kind).iter().cloned().collect()
    }

    /// Redis' count in a confirmation: channels and patterns together, shard channels apart.
    pub fn count(&self, kind: Kind) -> usize {
        match kind {
            Kind::Channel | Kind::Pattern => self.sets[0].len() + self.sets[1].len(),
            Kind::Shard => self.sets[2].len(),
        }
    }

    /// Subscriptions of one kind (CLIENT LIST's sub, psub, ssub).
    pub fn len(&self, kind: Kind) -> usize {
        self.sets[kind as usize].len()
    }

    pub fn is_empty(&self) -> bool {
        self.sets.iter().all(|s| s.is_empty())
    }

    /// Take every subscription out of the server's tables (the connection closes, RESET, or it
    /// authenticated into another tenant).
    pub fn clear(&mut self, hub: &PubSub, id: u64) {
        self.release(hub, id);
        for set in &mut self.sets {
            set.clear();
        }
    }

    /// Take every subscription out of the server's tables, leaving this record as it is (the
    /// connection is gone).
    pub fn release(&self, hub: &PubSub, id: u64) {
        for kind in [Kind::Channel, Kind::Pattern, Kind::Shard] {
            for name in &self.sets[kind as usize] {
                hub.unsubscribe(kind, self.tenant, name, id);
            }
        }
    }
}

/// A message built at most once per protocol version.
#[derive(Default)]
struct Built {
    resp2: Option<Bytes>,
    resp3: Option<Bytes>,
}

impl Built {
    fn get(&mut self, resp: ProtocolVersion, build: impl FnOnce(&mut BytesMut)) -> Bytes {
        let slot = match resp {
            ProtocolVersion::Resp2 => &mut self.resp2,
            ProtocolVersion::Resp3 => &mut self.resp3,
        };
        slot.get_or_insert_with(|| {
            let mut out = BytesMut::new();
            build(&mut out);
            out.freeze()
        })
        .clone()
    }
}

fn push_header(len: usize, resp: ProtocolVersion, out: &mut BytesMut) {
    gradus_proto::frame::encode_push_header(len, resp, out);
}

fn bulk(data: &[u8], out: &mut BytesMut) {
    out.reserve(data.len() + 16);
    out.put_u8(b'$');
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(data.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// One frame encoded for `outbox`'s protocol (a subscription confirmation, an invalidation).
pub fn encode_for(frame: &Frame, resp: ProtocolVersion) -> Bytes {
    let mut out = BytesMut::new();
    encode(frame, resp, &mut out);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox(id: u64) -> Arc<Outbox> {
        let addr = "127.0.0.1:1".parse().unwrap();
        Arc::new(Outbox::new(Arc::new(ClientHandle::new(id, addr, addr))))
    }

    #[test]
    fn output_limits_parse_and_show_like_redis() {
        let limits = OutputLimits::default();
        limits.apply("normal 0 0 0 slave 256mb 64mb 60 pubsub 32mb 8mb 60");
        assert_eq!(
            limits.text(),
            "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
        );
        limits.apply("pubsub 1mb 0 0");
        assert!(limits.text().ends_with("pubsub 1048576 0 0"));
        assert!(parse_output_limits("pubsub 1 2").is_err());
        assert!(parse_output_limits("other 1 2 3").is_err());
        assert!(parse_output_limits("pubsub x 2 3").is_err());
    }

    #[test]
    fn publish_reaches_only_the_tenants_subscribers() {
        let hub = PubSub::default();
        let (a, b) = (outbox(1), outbox(2));
        hub.subscribe(Kind::Channel, 0, Bytes::from_static(b"news"), &a);
        hub.subscribe(Kind::Channel, 1, Bytes::from_static(b"news"), &b);
        assert_eq!(
            hub.publish(Kind::Channel, 0, &Bytes::from_static(b"news"), b"hi"),
            1
        );
        let mut out = BytesMut::new();
        a.drain_into(&mut out);
        assert_eq!(
            &out[..],
            b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n"
        );
        assert_eq!(b.queued(), 0);
        hub.subscribe(Kind::Pattern, 1, Bytes::from_static(b"n*"), &b);
        assert_eq!(
            hub.publish(Kind::Channel, 1, &Bytes::from_static(b"news"), b"x"),
            2
        );
        assert_eq!(hub.numpat(Some(0)), 0);
        assert_eq!(hub.numpat(None), 1);
    }

    #[test]
    fn a_subscriber_over_the_hard_limit_is_closed_and_its_queue_dropped() {
        let hub = PubSub::default();
        hub.limits.apply("pubsub 1000 0 0");
        let a = outbox(1);
        a.set_class(LimitClass::Pubsub);
        hub.subscribe(Kind::Channel, 0, Bytes::from_static(b"c"), &a);
        let payload = [b'x'; 100];
        let mut delivered = 0;
        for _ in 0..100 {
            delivered += hub.publish(Kind::Channel, 0, &Bytes::from_static(b"c"), &payload);
        }
        assert!(delivered < 10, "{delivered}");
        assert!(a.handle.is_killed());
        assert_eq!(a.pending(), 0);
        assert_eq!(a.queued(), 0);
    }
}
