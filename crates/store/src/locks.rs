//! Native session locks: named, FIFO-fair, held by a connection, with fencing tokens, leases and
//! a per-lock waiter cap (DESIGN.md §2). This module is the lock table only; the server parks
//! waiting connections on the receivers it hands out and calls `release_client` when a connection
//! closes and `expire_leases` from a timer.
//!
//! Lock names live in their own name space per database (a lock `x` does not collide with key `x`)
//! and in memory only: the table is empty after a restart, like MySQL's `GET_LOCK`.
//!
//! Concurrency: one mutex over the table, held for O(1) steps (plus a scan for `release_client`
//! and `expire_leases`), never across an `.await`; hand-over to the next waiter is a oneshot send
//! done under that mutex, so grant order is exactly queue order. A waiter that gave up (timeout,
//! disconnect) is skipped at hand-over: its receiver is gone, or it removed itself first.
//!
//! Replicas: every grant and release is told, under the table mutex (so in the order they
//! happened), to the [`LockEvent`] sink the server installs once it has replicas; a replica
//! applies them with [`LockTable::apply`], so its table mirrors the primary's holders (not its
//! waiters: they are connections of the primary, which reconnect and queue again after a
//! failover). Holders a replica learned that way belong to no connection of its own (an
//! *orphan*, client id [`ORPHAN`]): after a promotion ([`LockTable::promote`]) they are released
//! by their token (a page's `SESSION.CLOSE`) or when their lease runs out, and a holder without a
//! lease is given one. Fencing tokens carry an epoch in their high bits, raised at each
//! promotion, so a token granted by a new primary is above every token the old one granted,
//! even those it granted just before it died and never streamed.
//!
//! [`LockStats`] counts what happened (grants, waits, waiter-cap rejections, expired leases, the
//! time waiters queued) in relaxed atomics updated under the table mutex the step already holds,
//! for INFO and the metrics endpoint.

use bytes::Bytes;
use hashbrown::HashMap;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, Notify};

/// A fencing token: strictly increasing across all grants of the table, and across promotions
/// (its bits from [`EPOCH_SHIFT`] up are the epoch).
pub type Token = u64;

/// Where a token's epoch starts: 2^40 grants per epoch, 2^23 epochs below `i64::MAX` (tokens
/// reach clients as signed integers).
pub const EPOCH_SHIFT: u32 = 40;

/// The client id of a holder that belongs to no connection here (learned from a primary).
pub const ORPHAN: u64 = 0;

/// A grant or a release, for replicas (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockEvent {
    /// `token` holds `name` in `db` from now on, for `lease_ms` (None: until released).
    Granted {
        db: usize,
        name: Bytes,
        token: Token,
        lease_ms: Option<u64>,
    },
    /// `name` in `db`, held by `token`, is free (or handed on: a `Granted` follows).
    Released {
        db: usize,
        name: Bytes,
        token: Token,
    },
}

/// Where [`LockEvent`]s go (the replication stream), called under the table mutex.
pub type LockSink = Box<dyn Fn(&LockEvent) + Send + Sync>;

/// What `acquire` decided.
pub enum Acquire {
    /// The lock is the caller's now.
    Granted(Token),
    /// Queued: the receiver yields the token when the lock is handed over.
    Queued {
        waiter: u64,
        grant: oneshot::Receiver<Token>,
    },
    /// `max_waiters` connections already wait: fail at once (redirect-loop protection).
    TooManyWaiters,
}

/// Why `release` refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseError {
    /// Nobody holds the lock.
    NotHeld,
    /// Someone holds it under another token.
    WrongToken,
}

/// Introspection of one lock (`LOCKS.INFO`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    pub db: usize,
    pub name: Bytes,
    pub holder_client: u64,
    pub token: Token,
    pub held_for: Duration,
    /// None = held until release or disconnect.
    pub lease_left: Option<Duration>,
    pub waiters: usize,
}

struct Holder {
    client: u64,
    token: Token,
    since: Instant,
    lease: Option<Duration>,
}

struct Waiter {
    id: u64,
    client: u64,
    queued_at: Instant,
    lease: Option<Duration>,
    grant: oneshot::Sender<Token>,
}

/// A lookup key that borrows the name: hashes exactly like `(usize, Bytes)` (fields in order,
/// `Bytes` hashes as its bytes), so lookups need no allocation.
#[derive(Hash)]
struct NameRef<'a>(usize, &'a [u8]);

impl hashbrown::Equivalent<(usize, Bytes)> for NameRef<'_> {
    fn equivalent(&self, key: &(usize, Bytes)) -> bool {
        self.0 == key.0 && self.1 == &key.1[..]
    }
}

struct LockState {
    holder: Holder,
    waiters: VecDeque<Waiter>,
}

#[derive(Default)]
struct Table {
    locks: HashMap<(usize, Bytes), LockState>,
    next_token: Token,
    next_waiter: u64,
    /// Told every grant and release (set while there are replicas).
    sink: Option<LockSink>,
}

/// The lock table of a server. See the module docs.
#[derive(Default)]
pub struct LockTable {
    table: Mutex<Table>,
    stats: LockStats,
    /// Told whenever a holder gets a lease, so the lease timer can sleep while none is held
    /// (see [`LockTable::lease_granted`]).
    lease_granted: Notify,
}

/// What [`LockTable::expire_leases`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseScan {
    /// Locks handed on because their lease ran out.
    pub expired: usize,
    /// Whether a holder with a lease is left (the timer must come back).
    pub leased_left: bool,
}

/// Number of buckets of a [`MicrosHistogram`].
pub const MICROS_BUCKETS: usize = 32;

/// A histogram of durations in power-of-two microsecond buckets, in relaxed atomics: bucket `i`
/// counts durations under `2^i` µs (and at least `2^(i-1)`); the last bucket is open-ended.
/// Cheap enough to record from any thread; a reader sees a consistent-enough copy for metrics.
pub struct MicrosHistogram {
    buckets: [AtomicU64; MICROS_BUCKETS],
    sum_micros: AtomicU64,
}

impl Default for MicrosHistogram {
    fn default() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_micros: AtomicU64::new(0),
        }
    }
}

impl MicrosHistogram {
    /// Count one duration.
    pub fn record(&self, d: Duration) {
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let bucket = (64 - micros.leading_zeros() as usize).min(MICROS_BUCKETS - 1);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// The bucket counts (bucket `i`: under `2^i` µs) and the sum in microseconds.
    pub fn read(&self) -> ([u64; MICROS_BUCKETS], u64) {
        (
            std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            self.sum_micros.load(Ordering::Relaxed),
        )
    }
}

/// What the lock table has done since start (never reset: metrics counters).
#[derive(Default)]
pub struct LockStats {
    /// Locks granted at once (no holder).
    pub granted_at_once: AtomicU64,
    /// Acquisitions that queued behind a holder.
    pub queued: AtomicU64,
    /// Waiters that were handed the lock.
    pub granted_after_wait: AtomicU64,
    /// Acquisitions refused because `max_waiters` already waited (LOCKBUSY).
    pub waiter_cap_rejections: AtomicU64,
    /// Locks handed on because their lease ran out.
    pub lease_expirations: AtomicU64,
    /// How long each waiter that was handed the lock had queued.
    pub wait: MicrosHistogram,
}

impl Table {
    fn token(&mut self) -> Token {
        self.next_token += 1;
        self.next_token
    }

    fn emit(&self, event: impl FnOnce() -> LockEvent) {
        if let Some(sink) = &self.sink {
            sink(&event());
        }
    }

    /// Give the lock at `key` to the first waiter still waiting, or drop it when none is.
    fn hand_over(
        &mut self,
        key: &(usize, Bytes),
        now: Instant,
        stats: &LockStats,
        lease_granted: &Notify,
    ) {
        if let Some(state) = self.locks.get(key) {
            let token = state.holder.token;
            self.emit(|| LockEvent::Released {
                db: key.0,
                name: key.1.clone(),
                token,
            });
        }
        loop {
            let Some(state) = self.locks.get_mut(key) else {
                return;
            };
            let Some(waiter) = state.waiters.pop_front() else {
                self.locks.remove(key);
                return;
            };
            self.next_token += 1;
            let token = self.next_token;
            // A waiter whose receiver is gone (timed out or disconnected) is skipped.
            if waiter.grant.send(token).is_ok() {
                stats.granted_after_wait.fetch_add(1, Ordering::Relaxed);
                stats
                    .wait
                    .record(now.saturating_duration_since(waiter.queued_at));
                let state = self.locks.get_mut(key).expect("checked above");
                state.holder = Holder {
                    client: waiter.client,
                    token,
                    since: now,
                    lease: waiter.lease,
                };
                if waiter.lease.is_some() {
                    lease_granted.notify_one();
                }
                self.emit(|| granted_event(key, token, waiter.lease));
                return;
            }
        }
    }
}

impl LockTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Take lock `name` in database `db` for connection `client`, or queue behind the holder and
    /// earlier waiters (unless `max_waiters` are already queued). `lease` bounds how long the lock
    /// may be held (None: until release or disconnect).
    pub fn acquire(
        &self,
        db: usize,
        name: &[u8],
        client: u64,
        lease: Option<Duration>,
        max_waiters: Option<usize>,
    ) -> Acquire {
        let mut t = self.table.lock();
        if !t.locks.contains_key(&NameRef(db, name)) {
            let token = t.token();
            t.locks.insert(
                (db, Bytes::copy_from_slice(name)),
                LockState {
                    holder: Holder {
                        client,
                        token,
                        since: Instant::now(),
                        lease,
                    },
                    waiters: VecDeque::new(),
                },
            );
            self.stats.granted_at_once.fetch_add(1, Ordering::Relaxed);
            if lease.is_some() {
                self.lease_granted.notify_one();
            }
            t.emit(|| granted_event(&(db, Bytes::copy_from_slice(name)), token, lease));
            return Acquire::Granted(token);
        }
        t.next_waiter += 1;
        let id = t.next_waiter;
        let state = t.locks.get_mut(&NameRef(db, name)).expect("checked above");
        if max_waiters.is_some_and(|max| state.waiters.len() >= max) {
            self.stats
                .waiter_cap_rejections
                .fetch_add(1, Ordering::Relaxed);
            return Acquire::TooManyWaiters;
        }
        self.stats.queued.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        state.waiters.push_back(Waiter {
            id,
            client,
            queued_at: Instant::now(),
            lease,
            grant: tx,
        });
        Acquire::Queued {
            waiter: id,
            grant: rx,
        }
    }

    /// Leave the queue of `name` (the wait timed out). Returns a token when the lock had already
    /// been handed to this waiter before it left: the caller then holds it and must release it
    /// (or keep it) — it must not ignore it.
    pub fn cancel_wait(
        &self,
        db: usize,
        name: &[u8],
        waiter: u64,
        mut grant: oneshot::Receiver<Token>,
    ) -> Option<Token> {
        let mut t = self.table.lock();
        if let Some(state) = t.locks.get_mut(&NameRef(db, name)) {
            state.waiters.retain(|w| w.id != waiter);
        }
        // Under the table mutex no hand-over can race with this check.
        grant.try_recv().ok()
    }

    /// Release `name` if `token` holds it; the next waiter gets it at once.
    pub fn release(&self, db: usize, name: &[u8], token: Token) -> Result<(), ReleaseError> {
        let mut t = self.table.lock();
        match t.locks.get_key_value(&NameRef(db, name)) {
            None => Err(ReleaseError::NotHeld),
            Some((_, state)) if state.holder.token != token => Err(ReleaseError::WrongToken),
            Some((key, _)) => {
                let key = key.clone();
                t.hand_over(&key, Instant::now(), &self.stats, &self.lease_granted);
                Ok(())
            }
        }
    }

    /// True when `token` currently holds `name` (SESSION.CLOSE checks this before writing).
    pub fn holds(&self, db: usize, name: &[u8], token: Token) -> bool {
        let t = self.table.lock();
        t.locks
            .get(&NameRef(db, name))
            .is_some_and(|s| s.holder.token == token)
    }

    /// A connection closed: release every lock it holds (handing each on) and drop its waits.
    /// Returns how many locks were released.
    pub fn release_client(&self, client: u64) -> usize {
        let mut t = self.table.lock();
        let held: Vec<(usize, Bytes)> = t
            .locks
            .iter()
            .filter(|(_, s)| s.holder.client == client)
            .map(|(k, _)| k.clone())
            .collect();
        for state in t.locks.values_mut() {
            state.waiters.retain(|w| w.client != client);
        }
        let now = Instant::now();
        for key in &held {
            t.hand_over(key, now, &self.stats, &self.lease_granted);
        }
        held.len()
    }

    /// Hand on every lock whose lease ran out. Returns how many expired.
    pub fn expire_leases(&self, now: Instant) -> LeaseScan {
        let mut t = self.table.lock();
        let mut expired: Vec<(usize, Bytes)> = Vec::new();
        let mut leased_left = false;
        for (key, state) in &t.locks {
            if let Some(lease) = state.holder.lease {
                if now.duration_since(state.holder.since) >= lease {
                    expired.push(key.clone());
                } else {
                    leased_left = true;
                }
            }
        }
        self.stats
            .lease_expirations
            .fetch_add(expired.len() as u64, Ordering::Relaxed);
        for key in &expired {
            t.hand_over(key, now, &self.stats, &self.lease_granted);
            // The next holder may have a lease of its own (then it notified).
        }
        LeaseScan {
            expired: expired.len(),
            leased_left,
        }
    }

    /// Completes once a holder has been given a lease since the last call completed (at once
    /// when one was given in between: the notification is kept). The lease timer waits here
    /// while [`LeaseScan::leased_left`] is false instead of waking every tick.
    pub async fn lease_granted(&self) {
        self.lease_granted.notified().await;
    }

    /// How long `token` has held `name` (None when it does not): right after a waiter's grant
    /// arrives, the hand-over latency (from the release that handed it on to the waiter running).
    pub fn held_for(&self, db: usize, name: &[u8], token: Token) -> Option<Duration> {
        let t = self.table.lock();
        t.locks
            .get(&NameRef(db, name))
            .filter(|s| s.holder.token == token)
            .map(|s| s.holder.since.elapsed())
    }

    /// Tell every grant and release from now on to `sink` (None: stop), and return what is held
    /// now as `Granted` events, in one step: a replica that loads them and then follows the sink
    /// misses nothing.
    pub fn stream_to(&self, sink: Option<LockSink>) -> Vec<LockEvent> {
        let mut t = self.table.lock();
        t.sink = sink;
        held_now(&t, Instant::now())
    }

    /// What is held now, as `Granted` events (each with the lease it has left), sorted.
    pub fn held(&self) -> Vec<LockEvent> {
        held_now(&self.table.lock(), Instant::now())
    }

    /// Mirror a primary's table (a replica): `Granted` makes `token` the holder (an orphan),
    /// `Released` frees the lock if `token` still holds it. Tokens granted here later stay above
    /// every token applied. Waiters of this table (there are none on a replica) are dropped with
    /// the lock they waited for. Nothing is told to the sink: the server streams the primary's
    /// own event on to its replicas, so their offsets stay the primary's.
    pub fn apply(&self, event: &LockEvent) {
        let mut t = self.table.lock();
        match event {
            LockEvent::Granted {
                db,
                name,
                token,
                lease_ms,
            } => {
                t.next_token = t.next_token.max(*token);
                t.locks.insert(
                    (*db, name.clone()),
                    LockState {
                        holder: Holder {
                            client: ORPHAN,
                            token: *token,
                            since: Instant::now(),
                            lease: lease_ms.map(Duration::from_millis),
                        },
                        waiters: VecDeque::new(),
                    },
                );
                if lease_ms.is_some() {
                    self.lease_granted.notify_one();
                }
            }
            LockEvent::Released { db, name, token } => {
                if t.locks
                    .get(&NameRef(*db, name))
                    .is_some_and(|s| s.holder.token == *token)
                {
                    t.locks.remove(&NameRef(*db, name));
                }
            }
        }
    }

    /// Forget every lock (a replica about to load a primary's table after a full sync).
    pub fn clear(&self) {
        self.table.lock().locks.clear();
    }

    /// This server became a primary: start a new epoch of tokens (above every token granted or
    /// applied so far), and give every orphan holder without a lease `orphan_lease`, counted
    /// from now, so a lock whose page died with the old primary is not held forever.
    pub fn promote(&self, orphan_lease: Duration) {
        let mut t = self.table.lock();
        t.next_token = ((t.next_token >> EPOCH_SHIFT) + 1) << EPOCH_SHIFT;
        let now = Instant::now();
        for state in t.locks.values_mut() {
            if state.holder.client == ORPHAN {
                let held = now.duration_since(state.holder.since);
                state.holder.lease = Some(match state.holder.lease {
                    Some(lease) => lease,
                    None => held + orphan_lease,
                });
                self.lease_granted.notify_one();
            }
        }
    }

    /// The counters (see [`LockStats`]).
    pub fn stats(&self) -> &LockStats {
        &self.stats
    }

    /// Locks held now and connections waiting for one.
    pub fn counts(&self) -> (usize, usize) {
        let t = self.table.lock();
        let waiters = t.locks.values().map(|s| s.waiters.len()).sum();
        (t.locks.len(), waiters)
    }

    /// Holder, token, age, lease left and queue length of `name`.
    pub fn info(&self, db: usize, name: &[u8]) -> Option<LockInfo> {
        let t = self.table.lock();
        t.locks
            .get_key_value(&NameRef(db, name))
            .map(|(key, s)| describe(key, s, Instant::now()))
    }

    /// Every lock, sorted by database and name.
    pub fn list(&self) -> Vec<LockInfo> {
        let t = self.table.lock();
        let now = Instant::now();
        let mut out: Vec<LockInfo> = t.locks.iter().map(|(k, s)| describe(k, s, now)).collect();
        out.sort_by(|a, b| (a.db, &a.name).cmp(&(b.db, &b.name)));
        out
    }
}

fn granted_event(key: &(usize, Bytes), token: Token, lease: Option<Duration>) -> LockEvent {
    LockEvent::Granted {
        db: key.0,
        name: key.1.clone(),
        token,
        lease_ms: lease.map(|l| u64::try_from(l.as_millis()).unwrap_or(u64::MAX)),
    }
}

fn held_now(t: &Table, now: Instant) -> Vec<LockEvent> {
    let mut out: Vec<LockEvent> = t
        .locks
        .iter()
        .map(|(key, s)| {
            let left = s
                .holder
                .lease
                .map(|l| l.saturating_sub(now.duration_since(s.holder.since)));
            granted_event(key, s.holder.token, left)
        })
        .collect();
    out.sort_by(|a, b| match (a, b) {
        (
            LockEvent::Granted { db, name, .. },
            LockEvent::Granted {
                db: db2,
                name: name2,
                ..
            },
        ) => (db, name).cmp(&(db2, name2)),
        _ => std::cmp::Ordering::Equal,
    });
    out
}

fn describe(key: &(usize, Bytes), s: &LockState, now: Instant) -> LockInfo {
    let held_for = now.duration_since(s.holder.since);
    LockInfo {
        db: key.0,
        name: key.1.clone(),
        holder_client: s.holder.client,
        token: s.holder.token,
        held_for,
        lease_left: s.holder.lease.map(|l| l.saturating_sub(held_for)),
        waiters: s.waiters.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granted(a: Acquire) -> Token {
        match a {
            Acquire::Granted(t) => t,
            _ => panic!("expected the lock to be granted"),
        }
    }

    fn queued(a: Acquire) -> (u64, oneshot::Receiver<Token>) {
        match a {
            Acquire::Queued { waiter, grant } => (waiter, grant),
            _ => panic!("expected to be queued"),
        }
    }

    #[test]
    fn fifo_hand_over_with_increasing_tokens() {
        let t = LockTable::new();
        let t1 = granted(t.acquire(0, b"s", 1, None, None));
        let (_, mut r2) = queued(t.acquire(0, b"s", 2, None, None));
        let (_, mut r3) = queued(t.acquire(0, b"s", 3, None, None));
        assert_eq!(t.release(0, b"s", t1 + 100), Err(ReleaseError::WrongToken));
        t.release(0, b"s", t1).unwrap();
        let t2 = r2.try_recv().unwrap();
        assert!(t2 > t1);
        assert!(r3.try_recv().is_err(), "the third waiter must still wait");
        assert_eq!(t.info(0, b"s").unwrap().holder_client, 2);
        t.release(0, b"s", t2).unwrap();
        let t3 = r3.try_recv().unwrap();
        assert!(t3 > t2);
        t.release(0, b"s", t3).unwrap();
        assert!(t.info(0, b"s").is_none());
        assert_eq!(t.release(0, b"s", t3), Err(ReleaseError::NotHeld));
    }

    #[test]
    fn names_are_per_database() {
        let t = LockTable::new();
        granted(t.acquire(0, b"s", 1, None, None));
        granted(t.acquire(1, b"s", 2, None, None));
        assert_eq!(t.list().len(), 2);
    }

    #[test]
    fn waiter_cap_rejects_at_once() {
        let t = LockTable::new();
        granted(t.acquire(0, b"s", 1, None, Some(1)));
        let _w = queued(t.acquire(0, b"s", 2, None, Some(1)));
        assert!(matches!(
            t.acquire(0, b"s", 3, None, Some(1)),
            Acquire::TooManyWaiters
        ));
        assert_eq!(t.info(0, b"s").unwrap().waiters, 1);
        assert_eq!(t.stats().waiter_cap_rejections.load(Ordering::Relaxed), 1);
        assert_eq!(t.stats().granted_at_once.load(Ordering::Relaxed), 1);
        assert_eq!(t.stats().queued.load(Ordering::Relaxed), 1);
        assert_eq!(t.counts(), (1, 1));
    }

    #[test]
    fn a_hand_over_counts_the_wait_and_the_holder_age() {
        let t = LockTable::new();
        let first = granted(t.acquire(0, b"s", 1, None, None));
        let (_, mut w) = queued(t.acquire(0, b"s", 2, None, None));
        t.release(0, b"s", first).unwrap();
        let token = w.try_recv().expect("handed over");
        assert!(t.held_for(0, b"s", token).is_some());
        assert!(t.held_for(0, b"s", first).is_none());
        assert_eq!(t.stats().granted_after_wait.load(Ordering::Relaxed), 1);
        let (buckets, _) = t.stats().wait.read();
        assert_eq!(buckets.iter().sum::<u64>(), 1);
    }

    #[test]
    fn disconnect_releases_and_hands_on_and_drops_waits() {
        let t = LockTable::new();
        granted(t.acquire(0, b"a", 1, None, None));
        let (_, mut r2) = queued(t.acquire(0, b"a", 2, None, None));
        granted(t.acquire(0, b"b", 2, None, None));
        let (_, r1) = queued(t.acquire(0, b"b", 1, None, None));
        assert_eq!(t.release_client(1), 1);
        assert!(r2.try_recv().is_ok(), "client 2 gets lock a");
        drop(r1);
        assert_eq!(
            t.info(0, b"b").unwrap().waiters,
            0,
            "client 1's wait on b is gone"
        );
    }

    #[test]
    fn a_timed_out_waiter_never_gets_the_lock_later() {
        let t = LockTable::new();
        let t1 = granted(t.acquire(0, b"s", 1, None, None));
        let (w2, r2) = queued(t.acquire(0, b"s", 2, None, None));
        let (_, mut r3) = queued(t.acquire(0, b"s", 3, None, None));
        assert_eq!(t.cancel_wait(0, b"s", w2, r2), None);
        t.release(0, b"s", t1).unwrap();
        assert!(r3.try_recv().is_ok(), "the lock skips the waiter that left");
        assert_eq!(t.info(0, b"s").unwrap().holder_client, 3);
    }

    #[test]
    fn a_grant_that_raced_a_timeout_is_reported() {
        let t = LockTable::new();
        let t1 = granted(t.acquire(0, b"s", 1, None, None));
        let (w2, r2) = queued(t.acquire(0, b"s", 2, None, None));
        t.release(0, b"s", t1).unwrap();
        let token = t.cancel_wait(0, b"s", w2, r2).expect("already granted");
        assert!(t.holds(0, b"s", token));
    }

    #[test]
    fn leases_expire_and_hand_on() {
        let t = LockTable::new();
        granted(t.acquire(0, b"s", 1, Some(Duration::from_millis(10)), None));
        let (_, mut r2) = queued(t.acquire(0, b"s", 2, None, None));
        assert_eq!(t.expire_leases(Instant::now()).expired, 0);
        assert_eq!(
            t.expire_leases(Instant::now() + Duration::from_millis(20)),
            LeaseScan {
                expired: 1,
                leased_left: false
            }
        );
        assert!(r2.try_recv().is_ok());
        assert_eq!(t.info(0, b"s").unwrap().lease_left, None);
    }

    fn sink_into(t: &LockTable) -> std::sync::Arc<Mutex<Vec<LockEvent>>> {
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let into = seen.clone();
        t.stream_to(Some(Box::new(move |e| into.lock().push(e.clone()))));
        seen
    }

    #[test]
    fn grants_and_releases_reach_the_sink_in_order() {
        let t = LockTable::new();
        let seen = sink_into(&t);
        let t1 = granted(t.acquire(0, b"s", 1, None, None));
        let (_, mut r2) = queued(t.acquire(0, b"s", 2, Some(Duration::from_secs(5)), None));
        t.release(0, b"s", t1).unwrap();
        let t2 = r2.try_recv().unwrap();
        t.release_client(2);
        let name = Bytes::from_static(b"s");
        assert_eq!(
            *seen.lock(),
            vec![
                LockEvent::Granted {
                    db: 0,
                    name: name.clone(),
                    token: t1,
                    lease_ms: None
                },
                LockEvent::Released {
                    db: 0,
                    name: name.clone(),
                    token: t1
                },
                LockEvent::Granted {
                    db: 0,
                    name: name.clone(),
                    token: t2,
                    lease_ms: Some(5000)
                },
                LockEvent::Released {
                    db: 0,
                    name,
                    token: t2
                },
            ]
        );
    }

    #[test]
    fn a_replica_mirrors_the_primary_and_a_promotion_keeps_tokens_rising() {
        let primary = LockTable::new();
        granted(primary.acquire(0, b"a", 1, None, None));
        let replica = LockTable::new();
        for e in primary.stream_to(None) {
            replica.apply(&e);
        }
        let seen = sink_into(&primary);
        let tb = granted(primary.acquire(0, b"b", 1, Some(Duration::from_secs(60)), None));
        for e in seen.lock().drain(..) {
            replica.apply(&e);
        }
        let info = replica.info(0, b"b").unwrap();
        assert_eq!((info.token, info.holder_client), (tb, ORPHAN));
        // A connection closing on the replica never frees the orphans.
        assert_eq!(replica.release_client(1), 0);
        replica.promote(Duration::from_secs(30));
        // The page that held `b` before the failover closes it with its old token.
        assert_eq!(replica.release(0, b"b", tb), Ok(()));
        let next = granted(replica.acquire(0, b"b", 7, None, None));
        assert!(
            next > tb && next >> EPOCH_SHIFT == 1,
            "a new epoch: {next:#x}"
        );
        // The orphan without a lease got one, counted from the promotion.
        let a = replica.info(0, b"a").unwrap();
        assert!(a.lease_left.is_some_and(|l| l <= Duration::from_secs(30)));
        assert_eq!(
            replica
                .expire_leases(Instant::now() + Duration::from_secs(31))
                .expired,
            1
        );
    }

    /// Whether `lease_granted` completes within a few milliseconds.
    fn lease_notified(t: &LockTable) -> bool {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(5), t.lease_granted())
                .await
                .is_ok()
        })
    }

    #[test]
    fn the_lease_timer_is_told_of_every_lease_and_of_none_else() {
        let t = LockTable::new();
        // No lease: nothing to wake the timer for.
        let t1 = granted(t.acquire(0, b"a", 1, None, None));
        assert!(!lease_notified(&t));
        assert_eq!(
            t.expire_leases(Instant::now()),
            LeaseScan {
                expired: 0,
                leased_left: false
            }
        );
        // A waiter with a lease, handed the lock on release.
        let (_, _r2) = queued(t.acquire(0, b"a", 2, Some(Duration::from_secs(30)), None));
        assert!(!lease_notified(&t));
        t.release(0, b"a", t1).unwrap();
        assert!(lease_notified(&t));
        assert!(t.expire_leases(Instant::now()).leased_left);
        // A lease granted at once.
        granted(t.acquire(0, b"b", 3, Some(Duration::from_millis(10)), None));
        assert!(lease_notified(&t));
        assert!(!lease_notified(&t), "one notification per lease");
        // Expired and handed to a waiter with a lease: the timer is told again.
        let (_, _r4) = queued(t.acquire(0, b"b", 4, Some(Duration::from_millis(10)), None));
        let later = Instant::now() + Duration::from_secs(60);
        assert_eq!(t.expire_leases(later).expired, 2);
        assert!(lease_notified(&t));
        // Orphans given a lease at promotion.
        let replica = LockTable::new();
        replica.apply(&LockEvent::Granted {
            db: 0,
            name: Bytes::from_static(b"o"),
            token: 7,
            lease_ms: None,
        });
        assert!(!lease_notified(&replica));
        replica.promote(Duration::from_secs(30));
        assert!(lease_notified(&replica));
        assert!(replica.expire_leases(Instant::now()).leased_left);
    }

    #[test]
    fn a_release_with_a_stale_token_leaves_the_new_holder() {
        let replica = LockTable::new();
        let name = Bytes::from_static(b"s");
        replica.apply(&LockEvent::Granted {
            db: 0,
            name: name.clone(),
            token: 5,
            lease_ms: None,
        });
        replica.apply(&LockEvent::Released {
            db: 0,
            name: name.clone(),
            token: 4,
        });
        assert!(replica.holds(0, b"s", 5));
        replica.apply(&LockEvent::Released {
            db: 0,
            name,
            token: 5,
        });
        assert!(replica.info(0, b"s").is_none());
    }
}
