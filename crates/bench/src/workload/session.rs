//! Session handling shared by the `lms` and `exam` workloads: lock-and-read with verification of
//! the content against what the bench last wrote, lock-wait accounting, and write-and-unlock that
//! records the new expected content *before* releasing the lock (so the next holder always
//! compares against the right bytes). Built on `target::Client`; measures into `stats`.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::run::RunCtx;
use crate::stats::{micros, Counters, Step};
use crate::target::{Client, OpenedSession};
use crate::workload::UnitError;

/// Client-side view of one session's lock holdings: when each party (page request, AJAX
/// request) last got the lock and when it began releasing it.
#[derive(Debug, Default, Clone, Copy)]
struct Hold {
    granted: Option<Instant>,
    releasing: Option<Instant>,
}

/// What the bench knows about one session id.
#[derive(Debug)]
pub struct SessionTracker {
    /// The session id (also the data key).
    pub sid: String,
    /// The content last written under the lock; `None` before the first write.
    expected: Mutex<Option<Bytes>>,
    /// False once a write's outcome is unknown (error after sending it): no more checks.
    trusted: Mutex<bool>,
    holds: Mutex<[Hold; 2]>,
    version: Mutex<u64>,
}

impl SessionTracker {
    /// A tracker for a session that does not exist yet.
    pub fn new(sid: String) -> Arc<SessionTracker> {
        Arc::new(SessionTracker {
            sid,
            expected: Mutex::new(None),
            trusted: Mutex::new(true),
            holds: Mutex::new([Hold::default(); 2]),
            version: Mutex::new(0),
        })
    }

    /// The expected content, if it is known.
    pub fn expected(&self) -> Option<Option<Bytes>> {
        if *self.trusted.lock() {
            Some(self.expected.lock().clone())
        } else {
            None
        }
    }

    /// The next version number (for content generation).
    pub fn next_version(&self) -> u64 {
        let mut v = self.version.lock();
        *v += 1;
        *v
    }
}

/// Builds session content of `size` bytes: `sid|v<version>|` followed by a deterministic filler.
pub fn session_content(sid: &str, version: u64, size: usize) -> Bytes {
    Bytes::from(crate::workload::keys::tagged_value(
        &format!("{sid}|v{version}"),
        size,
    ))
}

/// Locks and reads the session as `party` (0 page, 1 AJAX), checks the content, counts waits.
pub async fn open(
    ctx: &RunCtx,
    client: &mut Client,
    tracker: &SessionTracker,
    party: usize,
    steps: &mut Vec<Step>,
    in_window: bool,
) -> Result<OpenedSession, UnitError> {
    let counters = &ctx.collector.counters;
    let sent = Instant::now();
    let opened = match client.session_open(&tracker.sid).await {
        Ok(o) => o,
        Err(error) => {
            if in_window && matches!(error, crate::error::BenchError::LockTimeout(_)) {
                Counters::add(&counters.lock_timeouts, 1);
            }
            return Err(UnitError {
                op: "session_open",
                error,
            });
        }
    };
    let granted = Instant::now();
    let us = micros(granted - sent);
    steps.push(("session_open", us));
    let waited_for_sibling = {
        let mut holds = tracker.holds.lock();
        let sibling = holds[1 - party.min(1)];
        holds[party.min(1)] = Hold {
            granted: Some(granted),
            releasing: None,
        };
        match sibling.granted {
            Some(g) if g <= granted => sibling.releasing.is_none_or(|r| r >= sent),
            _ => false,
        }
    };
    if in_window {
        Counters::add(&counters.lock_acquisitions, 1);
        Counters::add(&counters.lock_polls, u64::from(opened.polls));
        if waited_for_sibling || opened.polls > 0 {
            ctx.collector.lock_wait(us);
        }
    }
    if let Some(expected) = tracker.expected() {
        let ok = expected.as_deref() == opened.data.as_deref();
        if in_window {
            if ok {
                Counters::add(&counters.sessions_verified, 1);
            } else {
                Counters::add(&counters.session_mismatches, 1);
                ctx.collector.mismatch(format!(
                    "session {}: expected {}, read {}",
                    tracker.sid,
                    describe(expected.as_deref()),
                    describe(opened.data.as_deref())
                ));
            }
        }
    }
    Ok(opened)
}

fn describe(v: Option<&[u8]>) -> String {
    match v {
        None => "nothing".into(),
        Some(b) => {
            let head: String = String::from_utf8_lossy(&b[..b.len().min(40)]).into_owned();
            format!("{} bytes starting {head:?}", b.len())
        }
    }
}

/// Writes `data` and releases the lock taken by [`open`].
#[allow(clippy::too_many_arguments)]
pub async fn close(
    ctx: &RunCtx,
    client: &mut Client,
    tracker: &SessionTracker,
    party: usize,
    opened: &OpenedSession,
    data: Bytes,
    steps: &mut Vec<Step>,
    in_window: bool,
) -> Result<(), UnitError> {
    // Still holding the lock: nobody else can read the session before this write lands.
    *tracker.expected.lock() = Some(data.clone());
    let started = Instant::now();
    tracker.holds.lock()[party.min(1)].releasing = Some(started);
    match client
        .session_close(&tracker.sid, &opened.token, &data)
        .await
    {
        Ok(()) => {
            steps.push(("session_close", micros(started.elapsed())));
            if in_window {
                Counters::add(&ctx.collector.counters.sessions_written, 1);
            }
            Ok(())
        }
        Err(error) => {
            *tracker.trusted.lock() = false;
            Err(UnitError {
                op: "session_close",
                error,
            })
        }
    }
}

/// Best-effort release after an error between [`open`] and [`close`] (writes the content read,
/// unchanged, so the expectation stays right; errors are ignored — the lease ends it anyway).
pub async fn release_after_error(
    client: &mut Client,
    tracker: &SessionTracker,
    opened: &OpenedSession,
) {
    let data = opened.data.clone().unwrap_or_default();
    if client
        .session_close(&tracker.sid, &opened.token, &data)
        .await
        .is_ok()
    {
        *tracker.expected.lock() = Some(data);
    } else {
        *tracker.trusted.lock() = false;
    }
}
