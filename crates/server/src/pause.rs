//! Client pauses (Redis 6.2's `CLIENT PAUSE timeout [WRITE|ALL]`, and FAILOVER's pause of
//! writes): which commands of ordinary clients wait, until when, and the wake-up of those
//! waiting.
//!
//! As in Redis' `pauseClients`, each purpose (the CLIENT PAUSE command, a FAILOVER) holds its
//! own pause (a mode and an end time); the effective pause is the most restrictive of those not
//! yet ended, until the furthest end among them. A paused command is *postponed*: dispatch
//! hands its arguments back to the connection (`ClientState::postponed`), which waits on
//! [`Pauses::changed`] (a change of the pauses, or the end of the current one; no polling, no
//! task per client) and then dispatches it again: it runs, or waits again if still paused, as
//! Redis re-processes its postponed clients. A replica's link (the stream to it) is never
//! paused; a replica's own link to its primary waits out a pause of writes (as Redis pauses
//! its master client) in `repl::replica`, not here. While writes are paused, active expiry
//! does not run (no DEL reaches the stream), as in Redis.
//!
//! May import: nothing of the server (a leaf; `dispatch`, `connection`, the CLIENT command,
//! FAILOVER and the expiry timer use it).

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::watch;

/// What a pause holds back, least restrictive first (the order is Redis' `pause_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PauseMode {
    Off,
    /// Commands that may write or propagate (writes, PUBLISH, PFCOUNT, scripts that may write,
    /// EXEC of any of them).
    Write,
    /// Every command.
    All,
}

/// Why a pause was set (Redis' `pause_purpose`); each purpose's pause is independent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PausePurpose {
    ClientCommand = 0,
    Failover = 1,
}

#[derive(Debug, Clone, Copy)]
struct Pause {
    mode: PauseMode,
    /// Unix ms after which it no longer holds (`u64::MAX`: until lifted).
    end_ms: u64,
}

/// The pauses in force, and the signal waiting clients watch.
pub struct Pauses {
    /// One slot per [`PausePurpose`]. A short lock, never held across an `.await`.
    by_purpose: Mutex<[Option<Pause>; 2]>,
    /// True while any pause is set (ended or not): the dispatcher's fast path reads only this.
    any: AtomicBool,
    /// Bumped at every change, so waiting clients re-check.
    generation: watch::Sender<u64>,
}

impl Default for Pauses {
    fn default() -> Self {
        Self {
            by_purpose: Mutex::new([None, None]),
            any: AtomicBool::new(false),
            generation: watch::channel(0).0,
        }
    }
}

impl Pauses {
    /// Set (or extend) `purpose`'s pause: as Redis, the mode becomes the more restrictive of
    /// the old and the new, and the end the later one. An `end_ms` already past lifts nothing
    /// and holds nothing.
    pub fn pause(&self, purpose: PausePurpose, mode: PauseMode, end_ms: u64, now_ms: u64) {
        {
            let mut slots = self.by_purpose.lock();
            let slot = &mut slots[purpose as usize];
            *slot = match *slot {
                Some(p) if p.end_ms >= now_ms => Some(Pause {
                    mode: p.mode.max(mode),
                    end_ms: p.end_ms.max(end_ms),
                }),
                _ => Some(Pause { mode, end_ms }),
            };
            self.any.store(true, Ordering::Release);
        }
        self.generation.send_modify(|g| *g += 1);
    }

    /// Lift `purpose`'s pause (CLIENT UNPAUSE, the end of a FAILOVER); the clients it held run.
    pub fn unpause(&self, purpose: PausePurpose) {
        {
            let mut slots = self.by_purpose.lock();
            slots[purpose as usize] = None;
            self.any
                .store(slots.iter().any(Option::is_some), Ordering::Release);
        }
        self.generation.send_modify(|g| *g += 1);
    }

    /// The effective pause at `now_ms`: the most restrictive mode among the pauses not ended,
    /// and the furthest end among those of that mode.
    pub fn current(&self, now_ms: u64) -> (PauseMode, u64) {
        if !self.any.load(Ordering::Acquire) {
            return (PauseMode::Off, 0);
        }
        let slots = self.by_purpose.lock();
        let live = || slots.iter().flatten().filter(|p| p.end_ms >= now_ms);
        let mode = live().map(|p| p.mode).max().unwrap_or(PauseMode::Off);
        let end = live()
            .filter(|p| p.mode == mode)
            .map(|p| p.end_ms)
            .max()
            .unwrap_or(0);
        (mode, end)
    }

    /// Whether a command of an ordinary client waits now: every command under an ALL pause,
    /// one that may write (`may_write`) under a WRITE pause.
    pub fn holds(&self, may_write: bool, now_ms: u64) -> bool {
        match self.current(now_ms).0 {
            PauseMode::Off => false,
            PauseMode::Write => may_write,
            PauseMode::All => true,
        }
    }

    /// Until when (Unix ms; 0: not now) expired keys stay in place: the furthest end among the
    /// pauses not ended (every pause holds writes back). `Shared::pause` hands it to the store.
    pub fn expiry_held_until(&self, now_ms: u64) -> u64 {
        if !self.any.load(Ordering::Acquire) {
            return 0;
        }
        let slots = self.by_purpose.lock();
        slots
            .iter()
            .flatten()
            .filter(|p| p.end_ms >= now_ms)
            .map(|p| p.end_ms.saturating_add(1))
            .max()
            .unwrap_or(0)
    }

    /// Whether writes are held back now (active expiry waits then).
    pub fn writes_paused(&self, now_ms: u64) -> bool {
        self.holds(true, now_ms)
    }

    /// Resolves when the pauses change (set, extended, lifted) or the current pause ends; a
    /// postponed command is then dispatched again.
    pub async fn changed(&self) {
        let mut rx = self.generation.subscribe();
        let now = gradus_store::now_ms();
        let (mode, end_ms) = self.current(now);
        if mode == PauseMode::Off {
            return;
        }
        let wait = end_ms.saturating_sub(now).saturating_add(1);
        // u64::MAX: until lifted (FAILOVER's pause); no timer needed.
        let sleep = async {
            if end_ms == u64::MAX {
                std::future::pending::<()>().await
            } else {
                tokio::time::sleep(std::time::Duration::from_millis(wait)).await
            }
        };
        tokio::select! {
            _ = rx.changed() => {}
            _ = sleep => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_restrictive_pause_holds_until_its_furthest_end() {
        let p = Pauses::default();
        assert!(!p.holds(true, 100));
        p.pause(PausePurpose::ClientCommand, PauseMode::Write, 200, 100);
        assert!(p.holds(true, 150));
        assert!(!p.holds(false, 150));
        // Extending keeps the stricter mode and the later end.
        p.pause(PausePurpose::ClientCommand, PauseMode::All, 150, 100);
        assert_eq!(p.current(120), (PauseMode::All, 200));
        p.pause(PausePurpose::ClientCommand, PauseMode::Write, 300, 120);
        assert_eq!(p.current(120), (PauseMode::All, 300));
        assert!(!p.holds(true, 301));
        p.pause(PausePurpose::Failover, PauseMode::Write, u64::MAX, 100);
        p.unpause(PausePurpose::ClientCommand);
        assert_eq!(p.current(400), (PauseMode::Write, u64::MAX));
        p.unpause(PausePurpose::Failover);
        assert_eq!(p.current(400), (PauseMode::Off, 0));
    }

    #[test]
    fn expiry_is_held_until_the_furthest_pause_ends() {
        let p = Pauses::default();
        assert_eq!(p.expiry_held_until(100), 0);
        p.pause(PausePurpose::ClientCommand, PauseMode::All, 200, 100);
        p.pause(PausePurpose::Failover, PauseMode::Write, 500, 100);
        // The pause ends after its end ms (`current` holds at `end_ms` itself).
        assert_eq!(p.expiry_held_until(150), 501);
        p.unpause(PausePurpose::Failover);
        assert_eq!(p.expiry_held_until(150), 201);
        assert_eq!(p.expiry_held_until(300), 0);
    }

    #[test]
    fn an_ended_pause_is_replaced_not_extended() {
        let p = Pauses::default();
        p.pause(PausePurpose::ClientCommand, PauseMode::All, 100, 50);
        p.pause(PausePurpose::ClientCommand, PauseMode::Write, 300, 200);
        assert_eq!(p.current(250), (PauseMode::Write, 300));
        // A zero timeout (end in the past) holds nothing.
        p.unpause(PausePurpose::ClientCommand);
        p.pause(PausePurpose::ClientCommand, PauseMode::All, 0, 200);
        assert!(!p.holds(false, 200));
    }

    #[tokio::test]
    async fn waiting_clients_wake_when_lifted() {
        let p = std::sync::Arc::new(Pauses::default());
        p.pause(PausePurpose::Failover, PauseMode::All, u64::MAX, 0);
        let waiter = tokio::spawn({
            let p = p.clone();
            async move { p.changed().await }
        });
        tokio::task::yield_now().await;
        p.unpause(PausePurpose::Failover);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
    }
}
