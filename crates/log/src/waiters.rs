//! Async waiters for the durable LSN ([`crate::Log::wait_durable`]), kept in LSN order so a
//! commit wakes only the tasks whose records it made durable.
//!
//! With concurrent strict writers two batches are usually in flight: one being fsynced, the
//! next one gathering. A broadcast (such as a `watch` channel) would wake the waiters of both on
//! every commit, half of them only to find their LSN not durable yet and park again — a task
//! poll and often a worker-thread wake-up each, for nothing. Here each waiting future
//! registers its waker under its LSN; [`DurableWaiters::wake_durable`] takes the ones at or
//! below the new durable LSN, and [`DurableWaiters::wake_all`] (poisoning, writer exit) the rest.
//!
//! No lost wake-ups: the writer publishes the new durable LSN (or the poison, or its exit)
//! *before* it takes the list's lock to wake, and a future checks those conditions again
//! *under* that lock before it registers. So either the future sees the change, or its waker
//! is in the list when the writer looks.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

use crate::error::LogError;
use crate::writer::Shared;
use crate::Lsn;

/// Registered wakers by (LSN, registration id).
#[derive(Default)]
pub(crate) struct DurableWaiters {
    list: Mutex<List>,
}

#[derive(Default)]
struct List {
    next_id: u64,
    by_lsn: BTreeMap<(Lsn, u64), Waker>,
}

impl DurableWaiters {
    /// Wakes every waiter whose LSN is at or below `durable` (already published).
    pub fn wake_durable(&self, durable: Lsn) {
        let woken = {
            let mut list = self.list.lock();
            match list.by_lsn.first_key_value() {
                Some((&(first, _), _)) if first <= durable => {
                    let later = list.by_lsn.split_off(&(durable.saturating_add(1), 0));
                    std::mem::replace(&mut list.by_lsn, later)
                }
                _ => return,
            }
        };
        for waker in woken.into_values() {
            waker.wake();
        }
    }

    /// Wakes every waiter (the log was poisoned or the writer exited; already published).
    pub fn wake_all(&self) {
        let woken = std::mem::take(&mut self.list.lock().by_lsn);
        for waker in woken.into_values() {
            waker.wake();
        }
    }

    /// How many futures are registered (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.list.lock().by_lsn.len()
    }
}

/// What a wait ends with, checked against the published state.
fn outcome(shared: &Shared, lsn: Lsn) -> Option<Result<(), LogError>> {
    if shared.durable_lsn.load(Ordering::Acquire) >= lsn {
        return Some(Ok(()));
    }
    if let Some(err) = shared.wait_error() {
        return Some(Err(err));
    }
    if shared.writer_exited.load(Ordering::Acquire) {
        return Some(Err(LogError::Closed));
    }
    None
}

/// Resolves once `lsn` is durable, or with the poison or [`LogError::Closed`]. Cancel-safe:
/// dropping it removes its registration.
pub(crate) struct WaitDurable<'a> {
    shared: &'a Shared,
    lsn: Lsn,
    key: Option<(Lsn, u64)>,
}

impl<'a> WaitDurable<'a> {
    pub fn new(shared: &'a Shared, lsn: Lsn) -> Self {
        WaitDurable {
            shared,
            lsn,
            key: None,
        }
    }
}

impl Future for WaitDurable<'_> {
    type Output = Result<(), LogError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(done) = outcome(this.shared, this.lsn) {
            if let Some(key) = this.key.take() {
                this.shared.durable_waiters.list.lock().by_lsn.remove(&key);
            }
            return Poll::Ready(done);
        }
        let mut list = this.shared.durable_waiters.list.lock();
        // Checked again under the lock: see the module docs.
        if let Some(done) = outcome(this.shared, this.lsn) {
            if let Some(key) = this.key.take() {
                list.by_lsn.remove(&key);
            }
            return Poll::Ready(done);
        }
        match this.key.and_then(|key| list.by_lsn.get_mut(&key)) {
            Some(waker) => {
                if !waker.will_wake(cx.waker()) {
                    *waker = cx.waker().clone();
                }
            }
            None => {
                // First poll, or the writer took the waker and woke this future without the
                // LSN being durable (`wake_all` racing a check): register (again).
                let key = (this.lsn, list.next_id);
                list.next_id += 1;
                list.by_lsn.insert(key, cx.waker().clone());
                this.key = Some(key);
            }
        }
        Poll::Pending
    }
}

impl Drop for WaitDurable<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.shared.durable_waiters.list.lock().by_lsn.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counter() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    #[test]
    fn a_commit_wakes_only_the_waiters_it_covers() {
        let waiters = DurableWaiters::default();
        let (early, early_waker) = counter();
        let (late, late_waker) = counter();
        {
            let mut list = waiters.list.lock();
            list.by_lsn.insert((5, 0), early_waker);
            list.by_lsn.insert((9, 1), late_waker);
        }
        waiters.wake_durable(4);
        assert_eq!((early.0.load(Ordering::SeqCst), waiters.len()), (0, 2));
        waiters.wake_durable(7);
        assert_eq!(early.0.load(Ordering::SeqCst), 1);
        assert_eq!(
            late.0.load(Ordering::SeqCst),
            0,
            "LSN 9 is not durable at 7"
        );
        assert_eq!(waiters.len(), 1);
        waiters.wake_durable(9);
        assert_eq!((late.0.load(Ordering::SeqCst), waiters.len()), (1, 0));
    }

    #[test]
    fn wake_all_empties_the_list() {
        let waiters = DurableWaiters::default();
        let (count, waker) = counter();
        for i in 0..3 {
            waiters
                .list
                .lock()
                .by_lsn
                .insert((100 + i, i), waker.clone());
        }
        waiters.wake_all();
        assert_eq!((count.0.load(Ordering::SeqCst), waiters.len()), (3, 0));
    }
}
