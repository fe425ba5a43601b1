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
//! [`LockStats`] counts what happened (grants, waits, waiter-cap rejections, expired leases, the
//! time waiters queued) in relaxed atomics updated under the table mutex the step already holds,
//! for INFO and the metrics endpoint.

use bytes::Bytes;
use hashbrown::HashMap;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// A fencing token: strictly increasing across all grants of the table.
pub type Token = u64;

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
}

/// The lock table of a server. See the module docs.
#[derive(Default)]
pub struct LockTable {
    table: Mutex<Table>,
    stats: LockStats,
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

    /// Give the lock at `key` to the first waiter still waiting, or drop it when none is.
    fn hand_over(&mut self, key: &(usize, Bytes), now: Instant, stats: &LockStats) {
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
                t.hand_over(&key, Instant::now(), &self.stats);
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
            t.hand_over(key, now, &self.stats);
        }
        held.len()
    }

    /// Hand on every lock whose lease ran out. Returns how many expired.
    pub fn expire_leases(&self, now: Instant) -> usize {
        let mut t = self.table.lock();
        let expired: Vec<(usize, Bytes)> = t
            .locks
            .iter()
            .filter(|(_, s)| {
                s.holder
                    .lease
                    .is_some_and(|lease| now.duration_since(s.holder.since) >= lease)
            })
            .map(|(k, _)| k.clone())
            .collect();
        self.stats
            .lease_expirations
            .fetch_add(expired.len() as u64, Ordering::Relaxed);
        for key in &expired {
            t.hand_over(key, now, &self.stats);
        }
        expired.len()
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
        assert_eq!(t.expire_leases(Instant::now()), 0);
        assert_eq!(
            t.expire_leases(Instant::now() + Duration::from_millis(20)),
            1
        );
        assert!(r2.try_recv().is_ok());
        assert_eq!(t.info(0, b"s").unwrap().lease_left, None);
    }
}
