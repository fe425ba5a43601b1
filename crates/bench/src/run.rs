//! Running one measurement point: a workload against one target at one concurrency (closed
//! loop: N users, each doing a unit of work, thinking, and doing the next) or one arrival rate
//! (open loop: units start on a schedule whatever the server does, and latency is measured from
//! the *intended* start so a slow server cannot hide its queueing — both service time and
//! response time are reported). Handles ramp-up, the warm-up that is excluded from the results,
//! the end by duration or unit count, a bounded drain, progress lines on stderr, resource
//! sampling, and aborting with a reason when the server becomes unreachable or dies — unless
//! the bench itself restarted it for a fault run (`fault`), when users wait for it to return.
//! Knows no protocol details (those are in `target`) and writes no files (`report` does).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::task::JoinHandle;

use crate::error::BenchError;
use crate::fault::FaultPlan;
use crate::report::{LockReport, PointResult, Verification, WireReport};
use crate::sampler::{read_sample, Resources, Sampler};
use crate::server::ManagedServer;
use crate::stats::{micros, Collector, Counters, Step};
use crate::target::{Client, ClientConfig, Endpoints};
use crate::workload::keys::{think_ms, ThinkDist};
use crate::workload::{UnitError, Workload};

/// Most open-loop arrivals allowed to wait for a connection at once; beyond it arrivals are
/// counted as dropped (bounded memory when the server cannot keep up).
const MAX_PENDING_ARRIVALS: u64 = 100_000;
/// Units of one user that may fail in a row before the run is declared broken.
const MAX_CONSECUTIVE_ERRORS: u32 = 50;
/// Sessions kept for the read-back at the end of a point.
const MAX_FINAL_CHECKS: usize = 2000;

/// Closed or open loop.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
#[serde(tag = "model", rename_all = "lowercase")]
pub enum Load {
    /// N users, each one unit of work at a time.
    Closed {
        /// Concurrent users.
        users: usize,
    },
    /// Units started at `rate` per second (Poisson arrivals), on a pool of connections.
    Open {
        /// Arrivals per second.
        rate: f64,
        /// Connection pool size (units beyond it wait, and the wait counts).
        connections: usize,
    },
}

/// Timing of one point.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Timing {
    /// Users start spread over this many seconds.
    pub ramp_up_s: f64,
    /// Results of work started before this many seconds are discarded.
    pub warmup_s: f64,
    /// Measured seconds after the warm-up.
    pub duration_s: f64,
    /// Stop early once this many units have been measured.
    pub units_limit: Option<u64>,
    /// Longest wait for in-flight units after the end, seconds.
    pub drain_s: f64,
    /// Mean think time between steps, ms.
    pub think_ms: f64,
    /// Think time distribution.
    pub think_dist: ThinkDist,
}

/// Shared state of one running point.
pub struct RunCtx {
    /// Server address of the target under test.
    pub addr: String,
    /// How clients of the target under test behave.
    pub client_config: Arc<ClientConfig>,
    /// Where each layer's connections go (the target under test, and a held one).
    pub endpoints: Endpoints,
    /// Measurements.
    pub collector: Collector,
    /// Unique prefix for this point's keys.
    pub tag: String,
    /// Start of the point.
    pub t0: Instant,
    /// End of the warm-up.
    pub warmup_end: Instant,
    /// Scheduled end of the measured window.
    pub end: Instant,
    /// Timing parameters.
    pub timing: Timing,
    /// Seed for per-user RNGs.
    pub seed: u64,
    stop_new: AtomicBool,
    abort_reason: Mutex<Option<String>>,
    finals: Mutex<Vec<(String, Bytes)>>,
    measured_until: Mutex<Option<Instant>>,
    reconnects: AtomicU64,
    /// Open loop: arrivals started and not yet finished (what a cut drain leaves behind).
    in_flight: AtomicU64,
    /// Fault-run bookkeeping (page timeline, running journeys' sessions, fault in progress).
    pub fault: crate::fault::FaultState,
}

impl RunCtx {
    /// True when work starting at `at` is measured.
    pub fn in_window(&self, at: Instant) -> bool {
        at >= self.warmup_end && !self.stop_new.load(Ordering::Relaxed)
    }

    /// True once no new unit should start.
    pub fn stopping(&self) -> bool {
        self.stop_new.load(Ordering::Relaxed)
    }

    fn stop(&self) {
        if !self.stop_new.swap(true, Ordering::Relaxed) {
            *self.measured_until.lock() = Some(Instant::now());
        }
    }

    /// Ends the run early with `reason` (kept: the first reason wins).
    pub fn abort(&self, reason: String) {
        let mut r = self.abort_reason.lock();
        if r.is_none() {
            *r = Some(reason);
        }
        drop(r);
        self.stop();
    }

    /// The abort reason, if the run was aborted.
    pub fn aborted(&self) -> Option<String> {
        self.abort_reason.lock().clone()
    }

    /// One think time, slept.
    pub async fn think(&self, rng: &mut SmallRng) {
        let ms = think_ms(self.timing.think_ms, self.timing.think_dist, rng);
        if ms > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(ms / 1000.0)).await;
        }
    }

    /// Opens a connection to the target.
    pub async fn connect(&self) -> Result<Client, BenchError> {
        self.endpoints.connect().await
    }

    /// Remembers a session for the read-back at the end (bounded).
    pub fn remember_final(&self, sid: String, data: Bytes) {
        let mut f = self.finals.lock();
        if f.len() < MAX_FINAL_CHECKS {
            f.push((sid, data));
        }
    }

    /// The sessions remembered for the final read-back so far.
    pub fn finals_snapshot(&self) -> Vec<(String, Bytes)> {
        self.finals.lock().clone()
    }

    /// Called after each measured unit: stops once the unit limit is reached.
    fn unit_done(&self) {
        if let Some(limit) = self.timing.units_limit {
            if Counters::get(&self.collector.counters.units) >= limit {
                self.stop();
            }
        }
    }
}

/// One open-loop slot or one closed-loop user's connections.
pub type Conns = Vec<Client>;

async fn connect_all(ctx: &RunCtx, n: usize) -> Result<Conns, BenchError> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        conns.push(ctx.connect().await?);
    }
    Ok(conns)
}

/// What the caller of [`run_point`] gets back.
pub struct PointOutcome {
    /// The figures.
    pub result: PointResult,
    /// Set when the point ended early.
    pub abort_reason: Option<String>,
}

/// Runs one point. `pid` is the server process to sample (None when attached); `endpoints`
/// say where each layer's connections go, `addr` and `client_config` are the target under
/// test's.
#[allow(clippy::too_many_arguments)]
pub async fn run_point(
    workload: Workload,
    addr: String,
    client_config: Arc<ClientConfig>,
    endpoints: Endpoints,
    load: Load,
    timing: Timing,
    seed: u64,
    tag: String,
    pid: Option<u32>,
    quiet: bool,
    fault: Option<(FaultPlan, Arc<Mutex<ManagedServer>>)>,
) -> PointOutcome {
    let prepare_started = Instant::now();
    let prepared = workload.prepare(&endpoints, &tag).await;
    let prepare_s = prepare_started.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let warmup_end = t0 + Duration::from_secs_f64(timing.warmup_s);
    let end = warmup_end + Duration::from_secs_f64(timing.duration_s);
    let ctx = Arc::new(RunCtx {
        addr,
        client_config,
        endpoints,
        collector: Collector::new(),
        tag,
        t0,
        warmup_end,
        end,
        timing,
        seed,
        stop_new: AtomicBool::new(false),
        abort_reason: Mutex::new(None),
        finals: Mutex::new(Vec::new()),
        measured_until: Mutex::new(None),
        reconnects: AtomicU64::new(0),
        in_flight: AtomicU64::new(0),
        fault: crate::fault::FaultState::default(),
    });
    if fault.is_some() {
        ctx.fault.enable();
    }
    if let Err(e) = prepared {
        ctx.abort(format!("preparing the data set failed: {e}"));
        return finish(ctx, workload, load, None, Vec::new(), prepare_s).await;
    }
    let mut sampler = pid.map(|p| Sampler::start(p, Duration::from_secs(1)));
    let fault_at = fault
        .as_ref()
        .map(|(plan, _)| warmup_end + Duration::from_secs_f64(timing.duration_s * plan.at));
    let mut fault_task = None;
    // A fault replaces the server process: resources cover the window up to the fault.
    let mut early_resources = None;
    let handles = match load {
        Load::Closed { users } => workload.spawn_closed(&ctx, users),
        Load::Open { rate, connections } => {
            vec![tokio::spawn(open_loop(
                ctx.clone(),
                workload.clone(),
                rate,
                connections,
            ))]
        }
    };
    // Monitor: progress once a second, window edges, the unit limit, server death.
    let mut window_start_sample = None;
    let mut client_start = None;
    let mut took_start = false;
    let mut last_ops = 0u64;
    let mut last_tick = Instant::now();
    loop {
        let now = Instant::now();
        if !took_start && now >= warmup_end {
            window_start_sample = sampler.as_ref().and_then(|s| s.now());
            client_start = read_sample(std::process::id(), 0.0).map(|s| (now, s));
            took_start = true;
        }
        if now >= end {
            ctx.stop();
        }
        if let (Some(at), None, Some((plan, server))) = (fault_at, &fault_task, &fault) {
            if now >= at && took_start {
                if let Some(s) = sampler.take() {
                    let end_sample = s.now();
                    early_resources = Some(s.finish(window_start_sample, end_sample));
                }
                fault_task = Some(tokio::spawn(crate::fault::execute(
                    ctx.clone(),
                    server.clone(),
                    *plan,
                )));
            }
        }
        if let Some(s) = &sampler {
            if s.process_gone() {
                ctx.abort("the server process exited during the run".into());
            }
        }
        if interrupted() {
            ctx.abort("interrupted (SIGINT)".into());
        }
        if ctx.stopping() {
            break;
        }
        if now.duration_since(last_tick) >= Duration::from_secs(1) {
            let (ops, p90) = ctx.collector.progress_tick();
            let rate = (ops - last_ops) as f64 / now.duration_since(last_tick).as_secs_f64();
            last_ops = ops;
            last_tick = now;
            if !quiet {
                let phase = if now < warmup_end {
                    "warm-up"
                } else {
                    "measure"
                };
                eprintln!(
                    "[{:6.1}s {phase}] {rate:9.0} ops/s  {} {}s measured  p90 {}: {}  errors {}",
                    now.duration_since(t0).as_secs_f64(),
                    Counters::get(&ctx.collector.counters.units),
                    workload.unit_name(),
                    workload.unit_name(),
                    p90.map(|us| format!("{:.2} ms", us as f64 / 1000.0))
                        .unwrap_or_else(|| "-".into()),
                    ctx.collector.errors_by_kind().values().sum::<u64>()
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if !took_start {
        window_start_sample = sampler.as_ref().and_then(|s| s.now());
    }
    let window_end_sample = sampler.as_ref().and_then(|s| s.now());
    let client_cpu = client_start.and_then(|(at, start)| {
        let end = read_sample(std::process::id(), 0.0)?;
        let secs = at.elapsed().as_secs_f64();
        (secs > 0.0).then(|| {
            (end.cpu_user_s + end.cpu_sys_s - start.cpu_user_s - start.cpu_sys_s) / secs * 100.0
        })
    });
    let resources = sampler
        .map(|s| s.finish(window_start_sample, window_end_sample))
        .or(early_resources);
    let fault_result = match fault_task {
        Some(task) => match task.await {
            Ok(r) => Some(r),
            Err(e) => Some((
                crate::fault::FaultReport {
                    note: Some(format!("fault task failed: {e}")),
                    ..Default::default()
                },
                None,
            )),
        },
        None => None,
    };
    let measured_end_s = ctx
        .measured_until
        .lock()
        .unwrap_or_else(Instant::now)
        .duration_since(t0)
        .as_secs_f64();
    let fault_report = fault_result.map(|(mut report, edges)| {
        crate::fault::finish_report(
            &ctx.fault,
            &mut report,
            edges,
            warmup_end.duration_since(t0).as_secs_f64(),
            measured_end_s,
        );
        report
    });
    let mut outcome = finish(ctx, workload, load, resources, handles, prepare_s).await;
    outcome.result.client_cpu_percent_of_one_core = client_cpu;
    outcome.result.fault = fault_report;
    outcome
}

/// Set once SIGINT arrives: running points end as partial and no further point starts.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// True after SIGINT.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Listens for SIGINT on the current runtime for the rest of the process.
pub fn watch_for_interrupt() {
    tokio::spawn(async {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("gradus-bench: interrupted; finishing the current point as partial");
            INTERRUPTED.store(true, Ordering::Relaxed);
        }
    });
}

async fn finish(
    ctx: Arc<RunCtx>,
    workload: Workload,
    load: Load,
    resources: Option<Resources>,
    handles: Vec<JoinHandle<()>>,
    prepare_s: f64,
) -> PointOutcome {
    ctx.stop();
    // Drain: let in-flight units finish, within a bound.
    let drain_until = Instant::now() + Duration::from_secs_f64(ctx.timing.drain_s);
    let mut cut = 0u64;
    for h in handles {
        let left = drain_until.saturating_duration_since(Instant::now());
        let abort = h.abort_handle();
        if tokio::time::timeout(left, h).await.is_err() {
            abort.abort();
            // An open-loop dispatcher takes its unfinished arrivals with it.
            cut += ctx.in_flight.swap(0, Ordering::Relaxed).max(1);
        }
    }
    Counters::add(&ctx.collector.counters.cut_at_end, cut);
    // Read back the sessions the bench wrote last (skipped when the server is gone).
    let mut final_checked = 0u64;
    let mut final_mismatches = 0u64;
    if ctx.aborted().is_none() {
        let finals = std::mem::take(&mut *ctx.finals.lock());
        if !finals.is_empty() {
            match ctx.connect().await {
                Ok(mut client) => {
                    for (sid, expected) in finals {
                        match client.session_read(&sid).await {
                            Ok(Some(data)) if data == expected => final_checked += 1,
                            Ok(other) => {
                                final_mismatches += 1;
                                ctx.collector.mismatch(format!(
                                    "final read-back of {sid}: {} bytes instead of {}",
                                    other.map(|d| d.len()).unwrap_or(0),
                                    expected.len()
                                ));
                            }
                            Err(e) => {
                                ctx.abort(format!("final read-back failed: {e}"));
                                break;
                            }
                        }
                    }
                }
                Err(e) => ctx.abort(format!("final read-back: {e}")),
            }
        }
    }
    let measured_until = ctx.measured_until.lock().unwrap_or_else(Instant::now);
    let measured_s = measured_until
        .saturating_duration_since(ctx.warmup_end)
        .as_secs_f64();
    let c = &ctx.collector.counters;
    let (wire_ops, ops): (BTreeMap<_, _>, BTreeMap<_, _>) = ctx
        .collector
        .summaries()
        .into_iter()
        .partition(|(name, _)| name.starts_with("wire."));
    let wire = WireReport::from_summaries(&wire_ops, &ctx.client_config);
    let unit = workload.unit_name();
    let units = Counters::get(&c.units);
    let total_ops: u64 = ops
        .iter()
        .filter(|(name, _)| Workload::is_protocol_op(name))
        .map(|(_, s)| s.count)
        .sum();
    let per_s = |n: u64| {
        if measured_s > 0.0 {
            n as f64 / measured_s
        } else {
            0.0
        }
    };
    let abort_reason = ctx.aborted();
    let result = PointResult {
        users: match load {
            Load::Closed { users } => Some(users),
            Load::Open { .. } => None,
        },
        rate: match load {
            Load::Open { rate, .. } => Some(rate),
            Load::Closed { .. } => None,
        },
        load,
        prepare_s,
        measured_s,
        unit: unit.to_string(),
        units,
        units_per_s: per_s(units),
        protocol_ops: total_ops,
        protocol_ops_per_s: per_s(total_ops),
        unit_latency: ops.get(unit).cloned().unwrap_or_default(),
        response_time: ops.get(&format!("{unit}.response_time") as &str).cloned(),
        pages_per_journey: workload.pages_per_journey(),
        ops,
        wire,
        abandoned_units: Counters::get(&c.abandoned),
        cut_at_end: Counters::get(&c.cut_at_end),
        dropped_arrivals: Counters::get(&c.dropped_arrivals),
        reconnects: ctx.reconnects.load(Ordering::Relaxed),
        errors: ctx.collector.errors_by_kind(),
        locks: LockReport {
            acquisitions: Counters::get(&c.lock_acquisitions),
            waits: Counters::get(&c.lock_waits),
            polls: Counters::get(&c.lock_polls),
            timeouts: Counters::get(&c.lock_timeouts),
            wait_latency: ctx.collector.lock_wait_summary(),
        },
        verification: Verification {
            sessions_written: Counters::get(&c.sessions_written),
            sessions_verified: Counters::get(&c.sessions_verified),
            session_mismatches: Counters::get(&c.session_mismatches),
            final_readback_checked: final_checked,
            final_readback_mismatches: final_mismatches,
            cache_hits: Counters::get(&c.cache_hits),
            cache_misses: Counters::get(&c.cache_misses),
            cache_regenerated: Counters::get(&c.cache_regenerated),
            value_mismatches: Counters::get(&c.value_mismatches),
            proctor_sessions_seen: Counters::get(&c.proctor_sessions_seen),
            first_mismatch: ctx.collector.first_mismatch(),
        },
        resources: resources.unwrap_or_else(|| {
            Resources::unavailable("no server process to sample (attached with an address)")
        }),
        client_cpu_percent_of_one_core: None,
        fault: None,
        partial: abort_reason.is_some(),
        partial_reason: abort_reason.clone(),
    };
    PointOutcome {
        result,
        abort_reason,
    }
}

/// The generic closed-loop user for unit-based workloads (`kv`, `lms`).
pub async fn closed_user(ctx: Arc<RunCtx>, workload: Workload, user: usize, users: usize) {
    let delay = if users > 1 {
        ctx.timing.ramp_up_s * user as f64 / users as f64
    } else {
        0.0
    };
    tokio::time::sleep(Duration::from_secs_f64(delay)).await;
    if ctx.stopping() {
        return;
    }
    let mut conns = match connect_all(&ctx, workload.conns_per_user()).await {
        Ok(c) => c,
        Err(e) => {
            ctx.abort(format!("user {user} cannot connect: {e}"));
            return;
        }
    };
    let mut rng = SmallRng::seed_from_u64(ctx.seed ^ (user as u64).wrapping_mul(0x9E37_79B9));
    let mut steps: Vec<Step> = Vec::with_capacity(2048);
    let mut consecutive_errors = 0u32;
    let mut seq = 0u64;
    while !ctx.stopping() {
        let started = Instant::now();
        let in_window = ctx.in_window(started);
        steps.clear();
        let wire_before = crate::workload::conns_wire(&conns);
        let outcome = workload
            .run_unit(&ctx, &mut conns, user, seq, &mut rng, &mut steps, in_window)
            .await;
        push_unit_wire(&mut steps, wire_before, &conns);
        seq += 1;
        let succeeded = outcome.is_ok();
        if !handle_outcome(
            &ctx, &workload, outcome, &steps, in_window, None, &mut conns,
        )
        .await
        {
            return;
        }
        if ctx.stopping() {
            break;
        }
        if !succeeded {
            consecutive_errors += 1;
            if consecutive_errors >= MAX_CONSECUTIVE_ERRORS {
                ctx.abort(format!(
                    "user {user}: {MAX_CONSECUTIVE_ERRORS} units in a row failed; see errors"
                ));
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        } else {
            consecutive_errors = 0;
        }
        if workload.think_between_units() {
            ctx.think(&mut rng).await;
        }
    }
}

/// Records a unit's outcome; on a broken connection reconnects. Returns false when the worker
/// must stop (the run was aborted).
async fn handle_outcome(
    ctx: &RunCtx,
    workload: &Workload,
    outcome: Result<u64, UnitError>,
    steps: &[Step],
    in_window: bool,
    response_us: Option<u64>,
    conns: &mut Conns,
) -> bool {
    match outcome {
        Ok(unit_us) => {
            ctx.collector
                .commit(steps, Some((workload.unit_name(), unit_us)), in_window);
            if let (Some(us), true) = (response_us, in_window) {
                ctx.collector.record_extra(workload.response_name(), us);
            }
            ctx.unit_done();
            true
        }
        Err(UnitError { op, error }) => {
            ctx.collector.error(op, &error, in_window);
            if in_window {
                Counters::add(&ctx.collector.counters.abandoned, 1);
            }
            if error.breaks_connection() {
                if ctx.stopping() {
                    return false;
                }
                ctx.reconnects.fetch_add(1, Ordering::Relaxed);
                let mut attempt = connect_all(ctx, conns.len()).await;
                // The bench restarted the server itself: wait for it instead of giving up.
                let give_up = Instant::now() + Duration::from_secs(150);
                while attempt.is_err()
                    && ctx.fault.active()
                    && !ctx.stopping()
                    && Instant::now() < give_up
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    attempt = connect_all(ctx, conns.len()).await;
                }
                if attempt.is_err() && ctx.stopping() {
                    // The run ended while the server was away: nothing lost but this unit.
                    return false;
                }
                match attempt {
                    Ok(fresh) => *conns = fresh,
                    Err(e) => {
                        ctx.abort(format!(
                            "lost the server: {error} during {op}; reconnecting failed: {e}"
                        ));
                        return false;
                    }
                }
            }
            true
        }
    }
}

/// Names of a unit's wire figures per layer.
const UNIT_SESSION_WIRE: [&str; 3] = [
    "wire.unit.session_sent",
    "wire.unit.session_received",
    "wire.unit.session_round_trips",
];
const UNIT_CACHE_WIRE: [&str; 3] = [
    "wire.unit.cache_sent",
    "wire.unit.cache_received",
    "wire.unit.cache_round_trips",
];

/// Adds a unit's traffic (the difference since `before`) to its steps, per layer.
fn push_unit_wire(steps: &mut Vec<Step>, before: Option<crate::target::LayerWire>, conns: &Conns) {
    if let (Some(before), Some(after)) = (before, crate::workload::conns_wire(conns)) {
        let w = after.since(before);
        crate::workload::push_wire(steps, UNIT_SESSION_WIRE, w.session);
        crate::workload::push_wire(steps, UNIT_CACHE_WIRE, w.cache);
    }
}

fn in_flight_done(ctx: &RunCtx) {
    ctx.in_flight.fetch_sub(1, Ordering::Relaxed);
}

/// Open loop: Poisson arrivals at `rate`, each unit on a pooled set of connections.
async fn open_loop(ctx: Arc<RunCtx>, workload: Workload, rate: f64, connections: usize) {
    let pool: Arc<Mutex<Vec<Conns>>> = Arc::new(Mutex::new(Vec::new()));
    let slots = Arc::new(tokio::sync::Semaphore::new(connections.max(1)));
    let pending = Arc::new(AtomicU64::new(0));
    let mut rng = SmallRng::seed_from_u64(ctx.seed);
    let mut intended = ctx.t0;
    let mut tasks = tokio::task::JoinSet::new();
    let mut arrival = 0u64;
    loop {
        let u: f64 = rng.gen_range(f64::EPSILON..1.0);
        intended += Duration::from_secs_f64(-u.ln() / rate);
        if intended >= ctx.end || ctx.stopping() {
            break;
        }
        tokio::time::sleep_until(intended.into()).await;
        if ctx.stopping() {
            break;
        }
        while tasks.try_join_next().is_some() {}
        if pending.load(Ordering::Relaxed) >= MAX_PENDING_ARRIVALS {
            if ctx.in_window(intended) {
                Counters::add(&ctx.collector.counters.dropped_arrivals, 1);
            }
            continue;
        }
        pending.fetch_add(1, Ordering::Relaxed);
        ctx.in_flight.fetch_add(1, Ordering::Relaxed);
        let (ctx2, wl, pool, slots, pending) = (
            ctx.clone(),
            workload.clone(),
            pool.clone(),
            slots.clone(),
            pending.clone(),
        );
        let this_arrival = arrival;
        arrival += 1;
        let this_intended = intended;
        tasks.spawn(async move {
            let Ok(_slot) = slots.acquire().await else {
                return;
            };
            pending.fetch_sub(1, Ordering::Relaxed);
            if ctx2.aborted().is_some() {
                in_flight_done(&ctx2);
                return;
            }
            let pooled = pool.lock().pop();
            let mut conns = match pooled {
                Some(c) => c,
                None => match connect_all(&ctx2, wl.conns_per_user()).await {
                    Ok(c) => c,
                    Err(e) => {
                        ctx2.abort(format!("cannot connect: {e}"));
                        in_flight_done(&ctx2);
                        return;
                    }
                },
            };
            let in_window = this_intended >= ctx2.warmup_end;
            let mut rng =
                SmallRng::seed_from_u64(ctx2.seed ^ this_arrival.wrapping_mul(0x9E37_79B9));
            let mut steps = Vec::with_capacity(2048);
            let wire_before = crate::workload::conns_wire(&conns);
            let outcome = wl
                .run_unit(
                    &ctx2,
                    &mut conns,
                    this_arrival as usize,
                    this_arrival,
                    &mut rng,
                    &mut steps,
                    in_window,
                )
                .await;
            push_unit_wire(&mut steps, wire_before, &conns);
            let response = micros(this_intended.elapsed());
            if handle_outcome(
                &ctx2,
                &wl,
                outcome,
                &steps,
                in_window,
                Some(response),
                &mut conns,
            )
            .await
            {
                pool.lock().push(conns);
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}
