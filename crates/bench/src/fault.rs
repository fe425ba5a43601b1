//! Fault runs: at a chosen share of the measured window the managed server is restarted —
//! cleanly (`--restart-at`, its own shutdown signal) or by `kill -9` of its process group
//! (`--kill-at`) — on the same port with the same data, and the same users carry on.
//!
//! What is measured, and how:
//! * **time until the server accepts connections again** — from the signal to the old process
//!   having exited (`stop_s`), and from the new process's start until it answers (`start_s`);
//! * **sessions lost** — the bench knows what every session should contain (the content it
//!   last wrote under the lock). Right before the signal it takes the sessions of the journeys in
//!   progress and of the last finished ones; once the server is back it reads each one and
//!   compares: intact, missing (gone altogether) or stale (an older write);
//! * **users who had to log in again** — users whose journey was in progress at the fault and
//!   whose session was gone afterwards (the LMS would send them to the login page);
//! * **cold-cache penalty** — P90 page latency in the window after the restart against the same
//!   length of window before the fault: 30 s, or less when the run is shorter (the window used is
//!   in the result).
//!
//! The journey a fault interrupts fails and is not counted (its user starts the next journey).
//! While the fault lasts, users that cannot reconnect wait for the server instead of ending the
//! run. Page latencies and the sessions of running journeys are recorded by the workloads through
//! [`FaultState`]; this module never talks to the server except to read sessions back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;

use crate::error::{BenchError, Result};
use crate::run::RunCtx;
use crate::server::ManagedServer;
use crate::stats::{new_histogram, LatencySummary};
use crate::workload::session::SessionTracker;

/// Longest cold-cache comparison window, seconds.
pub const PENALTY_WINDOW_S: f64 = 30.0;
/// Most page latencies kept for the penalty windows (16 bytes each).
const MAX_TIMELINE: usize = 4_000_000;
/// How long after a fault users that cannot reconnect keep trying.
pub const RECONNECT_GRACE: Duration = Duration::from_secs(15);
/// Longest wait for a restarted server, seconds.
const RESTART_TIMEOUT_S: u64 = 120;

/// Clean restart or crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultKind {
    /// The server's own shutdown signal, then a start.
    Restart,
    /// `kill -9` of the server's process group, then a start.
    Kill,
}

/// When and how to fault.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FaultPlan {
    /// Restart or kill.
    pub kind: FaultKind,
    /// Share of the measured window (0..1) after which the fault happens.
    pub at: f64,
}

impl FaultPlan {
    /// Parses `50%` or `0.5`.
    pub fn parse(kind: FaultKind, text: &str) -> Result<FaultPlan> {
        let t = text.trim();
        let at = match t.strip_suffix('%') {
            Some(p) => p.trim().parse::<f64>().map(|p| p / 100.0),
            None => t.parse::<f64>(),
        }
        .map_err(|_| BenchError::Input(format!("fault time {text:?}: expected e.g. 50% or 0.5")))?;
        if !(0.0..1.0).contains(&at) {
            return Err(BenchError::Input(format!(
                "fault time {text:?}: must be within the measured window (0% to 99%)"
            )));
        }
        Ok(FaultPlan { kind, at })
    }
}

/// What a fault run found.
#[derive(Debug, Clone, Serialize, Default)]
pub struct FaultReport {
    /// `restart` or `kill`.
    pub kind: Option<FaultKind>,
    /// False when the target has no server process to restart (`files`).
    pub applicable: bool,
    /// Why not, or what went wrong.
    pub note: Option<String>,
    /// Seconds after the start of the measured window when the signal was sent.
    pub at_s: f64,
    /// Signal to exit of the old process, seconds.
    pub stop_s: f64,
    /// Start of the new process until it accepted connections, seconds.
    pub start_s: f64,
    /// `stop_s + start_s`: how long the store was unavailable.
    pub unavailable_s: f64,
    /// Sessions whose content the bench knew at the fault and read back afterwards.
    pub sessions_checked: u64,
    /// Read back exactly as last written.
    pub sessions_intact: u64,
    /// Gone after the fault.
    pub sessions_missing: u64,
    /// Present but older than the last write the store acknowledged.
    pub sessions_stale: u64,
    /// `sessions_missing + sessions_stale`.
    pub sessions_lost: u64,
    /// Users in the middle of a journey at the fault (with a session written).
    pub users_active: u64,
    /// Of those, users whose session was gone: they would have to log in again.
    pub users_logged_out: u64,
    /// Length of each penalty window, seconds (30, or less for a short run).
    pub penalty_window_s: f64,
    /// True when the window is shorter than 30 s.
    pub penalty_window_scaled: bool,
    /// Page latency in the window before the fault.
    pub pages_before: LatencySummary,
    /// Page latency in the window after the server was back.
    pub pages_after: LatencySummary,
    /// `pages_after.p90_us / pages_before.p90_us`.
    pub p90_ratio: Option<f64>,
}

/// Per-point fault bookkeeping, kept by the run context.
#[derive(Default)]
pub struct FaultState {
    /// Set from the fault until the server is back and the sessions are read.
    active: AtomicBool,
    /// (time since the point's start, page latency µs).
    timeline: Mutex<Vec<(f64, u64)>>,
    /// The journey each user is in (closed loop), by user index.
    live: Mutex<Vec<Option<Arc<SessionTracker>>>>,
    /// Whether page latencies are recorded (fault runs only).
    recording: AtomicBool,
    /// When the last fault ended (users still failing to connect just then keep trying a
    /// little longer: a database may accept the probe before it accepts every session).
    ended: Mutex<Option<Instant>>,
}

impl FaultState {
    /// Starts recording page latencies (a fault is planned).
    pub fn enable(&self) {
        self.recording.store(true, Ordering::Relaxed);
    }

    /// True while a fault is in progress, and for [`RECONNECT_GRACE`] after it.
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
            || self
                .ended
                .lock()
                .is_some_and(|at| at.elapsed() < RECONNECT_GRACE)
    }

    fn end(&self) {
        *self.ended.lock() = Some(Instant::now());
        self.active.store(false, Ordering::Relaxed);
    }

    /// Records one page latency at `at` since the point's start.
    pub fn record_page(&self, at: Duration, us: u64) {
        if !self.recording.load(Ordering::Relaxed) {
            return;
        }
        let mut t = self.timeline.lock();
        if t.len() < MAX_TIMELINE {
            t.push((at.as_secs_f64(), us));
        }
    }

    /// The session of the journey `user` is in now.
    pub fn set_live(&self, user: usize, tracker: Arc<SessionTracker>) {
        if !self.recording.load(Ordering::Relaxed) || user > 100_000 {
            return;
        }
        let mut live = self.live.lock();
        if live.len() <= user {
            live.resize(user + 1, None);
        }
        live[user] = Some(tracker);
    }

    fn window(&self, from: f64, to: f64) -> LatencySummary {
        let mut h = new_histogram();
        for &(at, us) in self.timeline.lock().iter() {
            if at >= from && at < to {
                let _ = h.record(us.max(1));
            }
        }
        LatencySummary::of(&h, 0)
    }
}

/// Performs the fault on `server` and reads the sessions back. Runs while the users go on.
pub async fn execute(
    ctx: Arc<RunCtx>,
    server: Arc<Mutex<ManagedServer>>,
    plan: FaultPlan,
) -> (FaultReport, Option<(f64, f64)>) {
    let mut report = FaultReport {
        kind: Some(plan.kind),
        applicable: true,
        ..FaultReport::default()
    };
    if server.lock().pid().is_none() {
        report.applicable = false;
        report.note = Some(
            "no server process: the files store lives in the local filesystem, which \
             a restart of the application does not touch"
                .into(),
        );
        return (report, None);
    }
    ctx.fault.active.store(true, Ordering::Relaxed);
    // The sessions whose content is known right now: journeys in progress and finished ones.
    let live: Vec<Arc<SessionTracker>> = ctx.fault.live.lock().iter().flatten().cloned().collect();
    let finals = ctx.finals_snapshot();
    let fault_start = Instant::now();
    report.at_s = fault_start
        .saturating_duration_since(ctx.warmup_end)
        .as_secs_f64();
    let kill = plan.kind == FaultKind::Kill;
    let restarted = tokio::task::spawn_blocking(move || {
        server
            .lock()
            .restart(kill, Duration::from_secs(RESTART_TIMEOUT_S))
    })
    .await;
    let timing = match restarted {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            ctx.fault.end();
            ctx.abort(format!("the server did not come back after the fault: {e}"));
            report.note = Some(e.to_string());
            return (report, None);
        }
        Err(e) => {
            ctx.fault.end();
            ctx.abort(format!("restart task failed: {e}"));
            report.note = Some(e.to_string());
            return (report, None);
        }
    };
    let back = Instant::now();
    report.stop_s = timing.stop_s;
    report.start_s = timing.start_s;
    report.unavailable_s = timing.stop_s + timing.start_s;
    if let Err(e) = read_back(&ctx, &live, &finals, &mut report).await {
        report.note = Some(format!("reading sessions back failed: {e}"));
    }
    ctx.fault.end();
    let t0 = ctx.t0;
    (
        report,
        Some((
            fault_start.duration_since(t0).as_secs_f64(),
            back.duration_since(t0).as_secs_f64(),
        )),
    )
}

async fn read_back(
    ctx: &RunCtx,
    live: &[Arc<SessionTracker>],
    finals: &[(String, bytes::Bytes)],
    report: &mut FaultReport,
) -> Result<()> {
    let mut client = ctx.connect().await?;
    let mut check = |expected: &bytes::Bytes, got: Option<bytes::Bytes>| -> bool {
        report.sessions_checked += 1;
        match got {
            Some(g) if g == *expected => {
                report.sessions_intact += 1;
                true
            }
            Some(_) => {
                report.sessions_stale += 1;
                true
            }
            None => {
                report.sessions_missing += 1;
                false
            }
        }
    };
    for tracker in live {
        // Untrusted (a write's outcome unknown) or never written: nothing to compare.
        let Some(Some(expected)) = tracker.expected() else {
            continue;
        };
        let got = client.session_read(&tracker.sid).await?;
        report.users_active += 1;
        if !check(&expected, got) {
            report.users_logged_out += 1;
        }
    }
    for (sid, expected) in finals {
        let got = client.session_read(sid).await?;
        check(expected, got);
    }
    report.sessions_lost = report.sessions_missing + report.sessions_stale;
    Ok(())
}

/// Fills the cold-cache figures once the point is over: windows of equal length before the
/// fault and after the server was back, at most [`PENALTY_WINDOW_S`].
pub fn finish_report(
    state: &FaultState,
    report: &mut FaultReport,
    edges: Option<(f64, f64)>,
    warmup_end_s: f64,
    measured_end_s: f64,
) {
    let Some((fault_s, back_s)) = edges else {
        return;
    };
    let window = PENALTY_WINDOW_S
        .min(fault_s - warmup_end_s)
        .min(measured_end_s - back_s)
        .max(0.0);
    report.penalty_window_s = window;
    report.penalty_window_scaled = window < PENALTY_WINDOW_S;
    report.pages_before = state.window(fault_s - window, fault_s);
    report.pages_after = state.window(back_s, back_s + window);
    if report.pages_before.p90_us > 0 && report.pages_after.count > 0 {
        report.p90_ratio =
            Some(report.pages_after.p90_us as f64 / report.pages_before.p90_us as f64);
    }
}

/// The report's sections on memory scenarios and space (when any target has a managed data
/// directory) and on faults (when any point has one), in Markdown.
pub fn markdown(result: &crate::report::BenchResult) -> String {
    use std::fmt::Write;
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let mut md = String::new();
    if result.targets.iter().any(|t| t.disk_bytes.is_some()) {
        let _ = writeln!(
            md,
            "\n## Memory and space\n\nBuffer pool / block cache / shared_buffers (as a share of \
             the estimated data, see `db::sizing`), and the server's data directory on disk after \
             the last point: all of it, then logs (WAL, redo, binary log, append-only file) and \
             table data apart (see `server::DiskUsage`).\n\n| target | memory share | buffer MiB | estimated data MiB | on disk MiB | logs MiB | table data MiB | knee |\n|---|---|---|---|---|---|---|---|"
        );
        for t in &result.targets {
            let knee = t
                .knee
                .as_ref()
                .map(|k| format!("{} users ({:.1} ms P90)", k.x, k.p90_ms))
                .unwrap_or_else(|| "none".into());
            let part = |f: fn(&crate::server::DiskUsage) -> u64| {
                t.disk
                    .as_ref()
                    .map(|d| format!("{:.1}", mib(f(d))))
                    .unwrap_or_else(|| "-".into())
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {knee} |",
                t.label,
                t.spec
                    .memory_pct
                    .map(|p| format!("{p}%"))
                    .unwrap_or_else(|| "-".into()),
                t.spec
                    .memory_bytes
                    .map(|b| format!("{:.1}", mib(b)))
                    .unwrap_or_else(|| "default".into()),
                t.spec
                    .data_estimate_bytes
                    .map(|b| format!("{:.1}", mib(b)))
                    .unwrap_or_else(|| "-".into()),
                t.disk_bytes
                    .map(|b| format!("{:.1}", mib(b)))
                    .unwrap_or_else(|| "-".into()),
                part(|d| d.log_bytes),
                part(|d| d.data_bytes),
            );
        }
    }
    let faults: Vec<_> = result
        .targets
        .iter()
        .flat_map(|t| t.points.iter().map(move |p| (t, p)))
        .filter_map(|(t, p)| p.fault.as_ref().map(|f| (t, p, f)))
        .collect();
    if !faults.is_empty() {
        let _ = writeln!(
            md,
            "\n## Faults\n\nSessions the bench knew at the fault (running journeys and the last \
             finished ones), read back once the server was up again; users logged out = running \
             journeys whose session was gone. Page P90 in equal windows before the fault and after \
             the server was back (30 s, shorter when the run is).\n\n| target | users | fault | at s | unavailable s | sessions checked | lost (missing + stale) | users logged out / active | window s | page P90 before ms | after ms | ratio | note |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for (t, p, f) in faults {
            let kind = match f.kind {
                Some(FaultKind::Kill) => "kill -9",
                Some(FaultKind::Restart) => "restart",
                None => "-",
            };
            if !f.applicable {
                let _ = writeln!(
                    md,
                    "| {} | {} | {kind} | - | - | - | - | - | - | - | - | - | {} |",
                    t.label,
                    p.users.unwrap_or(0),
                    f.note.clone().unwrap_or_default()
                );
                continue;
            }
            let _ = writeln!(
                md,
                "| {} | {} | {kind} | {:.1} | {:.2} | {} | {} ({} + {}) | {} / {} | {:.1} | {:.1} | {:.1} | {} | {} |",
                t.label,
                p.users.unwrap_or(0),
                f.at_s,
                f.unavailable_s,
                f.sessions_checked,
                f.sessions_lost,
                f.sessions_missing,
                f.sessions_stale,
                f.users_logged_out,
                f.users_active,
                f.penalty_window_s,
                f.pages_before.p90_us as f64 / 1000.0,
                f.pages_after.p90_us as f64 / 1000.0,
                f.p90_ratio
                    .map(|r| format!("{r:.2}"))
                    .unwrap_or_else(|| "-".into()),
                f.note.clone().unwrap_or_default()
            );
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_times_parse() {
        assert_eq!(FaultPlan::parse(FaultKind::Kill, "50%").unwrap().at, 0.5);
        assert_eq!(
            FaultPlan::parse(FaultKind::Restart, "0.25").unwrap().at,
            0.25
        );
        for bad in ["", "half", "100%", "-1%", "1.5"] {
            assert!(FaultPlan::parse(FaultKind::Kill, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn penalty_windows_shrink_for_short_runs() {
        let state = FaultState::default();
        state.enable();
        for i in 0..100 {
            // 1 ms pages before the fault at 10 s, 4 ms after the server is back at 11 s.
            let at = i as f64 * 0.2;
            let us = if at < 10.0 { 1000 } else { 4000 };
            state.record_page(Duration::from_secs_f64(at), us);
        }
        let mut report = FaultReport::default();
        finish_report(&state, &mut report, Some((10.0, 11.0)), 2.0, 20.0);
        assert_eq!(report.penalty_window_s, 8.0);
        assert!(report.penalty_window_scaled);
        assert_eq!(report.pages_before.count, 40);
        assert_eq!(report.pages_after.count, 40);
        let ratio = report.p90_ratio.unwrap();
        assert!((ratio - 4.0).abs() < 0.01, "{ratio}");
    }
}
