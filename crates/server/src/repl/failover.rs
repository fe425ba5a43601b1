//! FAILOVER's coordinated switchover (Redis 6.2's `failoverCommand` / `updateFailoverStatus`):
//! the state INFO shows as `master_failover_state`, and the task that drives it.
//!
//! The happy path, as Redis: FAILOVER pauses writes (a [`crate::pause`] of its own purpose, with
//! no end) and answers OK; the task waits until the target replica (the one named, or the
//! first online replica whose acknowledged offset reaches this primary's) has acknowledged
//! everything streamed; this server then follows the target (`replica::follow`) and its PSYNC
//! carries `FAILOVER`, which makes the target promote itself (as REPLICAOF NO ONE: a new id,
//! the old one kept as replid2) before it answers; the old primary continues from its own
//! offset (a partial resync) and the pause is lifted. TIMEOUT aborts the wait (or, with FORCE,
//! switches to the target anyway); FAILOVER ABORT cancels it; a refused PSYNC FAILOVER makes
//! this server a primary again. While a failover waits, no PING is streamed (the replica's
//! acknowledgement can then reach the offset).
//!
//! May import: `state`, `pause`, `repl` (the role, the replicas, `replica::follow`/`promote`).

use super::LinkState;
use crate::pause::{PauseMode, PausePurpose};
use crate::state::Shared;
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// INFO's `master_failover_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    None,
    /// Writes paused; waiting for the target to acknowledge everything.
    WaitingForSync,
    /// Following the target, whose PSYNC FAILOVER reply is awaited.
    InProgress,
}

#[derive(Debug, Clone)]
struct State {
    phase: Phase,
    target: Option<(String, u16)>,
    /// Unix ms when the wait ends (0: no TIMEOUT).
    end_ms: u64,
    force: bool,
    /// Bumped at every start and end, so a task of an earlier failover stops.
    generation: u64,
}

/// The failover in progress, if any.
pub struct Failover {
    state: Mutex<State>,
    /// Woken at ABORT so the task stops at once.
    changed: tokio::sync::Notify,
}

impl Default for Failover {
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                phase: Phase::None,
                target: None,
                end_ms: 0,
                force: false,
                generation: 0,
            }),
            changed: tokio::sync::Notify::new(),
        }
    }
}

impl Failover {
    pub fn phase(&self) -> Phase {
        self.state.lock().phase
    }

    /// INFO's words.
    pub fn state_name(&self) -> &'static str {
        match self.phase() {
            Phase::None => "no-failover",
            Phase::WaitingForSync => "waiting-for-sync",
            Phase::InProgress => "failover-in-progress",
        }
    }

    /// Whether this server's PSYNC must carry `FAILOVER`.
    pub fn in_progress(&self) -> bool {
        self.phase() == Phase::InProgress
    }
}

/// Start a failover whose checks have passed (see `command::failover`): pause writes and let
/// the task drive it. `timeout_ms` 0: wait until it succeeds or is aborted.
pub fn start(shared: &Arc<Shared>, target: Option<(String, u16)>, timeout_ms: u64, force: bool) {
    let now = gradus_store::now_ms();
    let generation = {
        let mut state = shared.failover.state.lock();
        state.phase = Phase::WaitingForSync;
        state.target = target;
        state.end_ms = if timeout_ms > 0 { now + timeout_ms } else { 0 };
        state.force = force;
        state.generation += 1;
        state.generation
    };
    shared.pause(PausePurpose::Failover, PauseMode::Write, u64::MAX, now);
    tokio::spawn(run(shared.clone(), generation));
}

/// End the failover (done, or given up): forget it and lift its pause.
pub fn clear(shared: &Shared) {
    {
        let mut state = shared.failover.state.lock();
        state.phase = Phase::None;
        state.target = None;
        state.end_ms = 0;
        state.force = false;
        state.generation += 1;
    }
    shared.failover.changed.notify_waiters();
    shared.unpause(PausePurpose::Failover);
}

/// Give the failover up (ABORT, a timeout, a refused PSYNC FAILOVER): a server that already
/// follows the target is a primary again (Redis' `abortFailover`). False when none was in
/// progress.
pub fn abort(shared: &Shared, why: &str) -> bool {
    let phase = shared.failover.phase();
    if phase == Phase::None {
        return false;
    }
    tracing::warn!(reason = why, "FAILOVER aborted");
    if phase == Phase::InProgress {
        super::replica::promote(shared);
    }
    clear(shared);
    true
}

/// The replica connected from `host:port` (its announced address and listening port).
fn find_replica(shared: &Shared, host: &str, port: u16) -> Option<Arc<super::ReplicaLink>> {
    shared
        .repl
        .replicas()
        .into_iter()
        .find(|r| *r.ip.lock() == host && r.port.load(Ordering::Relaxed) == u64::from(port))
}

/// FAILOVER TO's checks on the target (after the others, as Redis orders them).
pub fn check_target(shared: &Shared, host: &str, port: u16) -> Result<(), &'static str> {
    match find_replica(shared, host, port) {
        None => Err("FAILOVER target HOST and PORT is not a replica."),
        Some(r) if r.state() != LinkState::Online => Err("FAILOVER target replica is not online."),
        Some(_) => Ok(()),
    }
}

/// Drive one failover: wait for a caught-up target (woken by acknowledgements; re-checked at
/// least every 100 ms for the timeout), then follow it with PSYNC FAILOVER.
async fn run(shared: Arc<Shared>, generation: u64) {
    loop {
        let acked = shared.repl.acked.notified();
        let aborted = shared.failover.changed.notified();
        let (target, end_ms, force) = {
            let state = shared.failover.state.lock();
            if state.generation != generation || state.phase != Phase::WaitingForSync {
                return;
            }
            (state.target.clone(), state.end_ms, state.force)
        };
        let now = gradus_store::now_ms();
        if end_ms > 0 && end_ms <= now {
            match (force, target) {
                (true, Some((host, port))) => {
                    tracing::warn!(host, port, "FAILOVER time out exceeded, failing over");
                    switch_to(&shared, host, port);
                }
                _ => {
                    abort(&shared, "Replica never caught up before timeout");
                }
            }
            return;
        }
        let offset = shared.repl.offset();
        let caught_up = |r: &super::ReplicaLink| {
            r.state() == LinkState::Online && r.ack_offset.load(Ordering::Relaxed) >= offset
        };
        let ready = match &target {
            Some((host, port)) => find_replica(&shared, host, *port)
                .filter(|r| caught_up(r))
                .map(|_| (host.clone(), *port)),
            None => shared.repl.replicas().into_iter().find_map(|r| {
                let port = u16::try_from(r.port.load(Ordering::Relaxed)).ok()?;
                caught_up(&r).then(|| (r.ip.lock().clone(), port))
            }),
        };
        if let Some((host, port)) = ready {
            tracing::info!(host, port, "failover target is synced, failing over");
            switch_to(&shared, host, port);
            return;
        }
        tokio::select! {
            _ = acked => {}
            _ = aborted => {}
            _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
        }
    }
}

/// Follow the target; the replica task's PSYNC carries FAILOVER while the phase says so.
fn switch_to(shared: &Arc<Shared>, host: String, port: u16) {
    {
        let mut state = shared.failover.state.lock();
        state.phase = Phase::InProgress;
        state.target = Some((host.clone(), port));
    }
    super::replica::follow(shared, host, port);
}

/// PSYNC's checks for a failover, before anything else (Redis' `syncCommand`): `PSYNC replid
/// offset FAILOVER` from our primary makes this replica a primary (as REPLICAOF NO ONE) when
/// `replid` is ours; and no replica may sync while this server fails over.
pub fn on_psync(
    shared: &Shared,
    peer: &str,
    args: &[bytes::Bytes],
) -> Result<(), crate::error::CmdError> {
    use crate::error::CmdError;
    if args.len() > 3 && args[3].eq_ignore_ascii_case(b"failover") {
        tracing::warn!(
            replid = %String::from_utf8_lossy(&args[1]),
            "Failover request received"
        );
        if !shared.repl.is_replica() {
            return Err(CmdError::err("PSYNC FAILOVER can't be sent to a master."));
        }
        if args[1].as_ref() != shared.repl.replid().as_bytes() {
            return Err(CmdError::err("PSYNC FAILOVER replid must match my replid."));
        }
        super::replica::promote(shared);
        tracing::info!(peer, "MASTER MODE enabled (failover request)");
    }
    if shared.failover.phase() != Phase::None {
        return Err(CmdError::Other(
            "NOMASTERLINK Can't SYNC while failing over".into(),
        ));
    }
    Ok(())
}
