//! The workloads: what one user does, expressed in the logical operations of `target::Client`.
//!
//! * [`kv`] — YCSB-style mixes (A, B, C, F) over a preloaded key set; unit: one operation.
//! * [`lms`] — the simulated LMS user journey of 13 page views; unit: one journey.
//! * [`exam`] — students answering question groups while proctors poll; per-operation results.
//!
//! [`session`] holds the lock/verify/write logic that `lms` and `exam` share, [`keys`] the key and
//! think-time distributions and checkable values. Workloads measure into `stats` through the
//! `run` module's context; they never touch sockets directly.

pub mod exam;
pub mod keys;
pub mod kv;
pub mod lms;
pub mod session;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use serde::Serialize;
use tokio::task::JoinHandle;

use crate::error::{BenchError, Result};
use crate::run::{Conns, RunCtx};
use crate::stats::{micros, Counters, Step};
use crate::target::{Client, Endpoints};
use crate::wire::WireSnapshot;

/// A failed step: which operation, and why.
#[derive(Debug)]
pub struct UnitError {
    /// The operation that failed (an op name as in the results).
    pub op: &'static str,
    /// What happened.
    pub error: BenchError,
}

/// Which workload (command-line name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// YCSB-style key-value mixes.
    Kv,
    /// The 13-page LMS user journey.
    Lms,
    /// Online exam: students and proctors.
    Exam,
}

/// A configured workload (cheap to clone: parameters are shared).
#[derive(Debug, Clone)]
pub enum Workload {
    /// See [`kv`].
    Kv(Arc<kv::Kv>),
    /// See [`lms`].
    Lms(Arc<lms::Lms>),
    /// See [`exam`].
    Exam(Arc<exam::Exam>),
}

impl Workload {
    /// The workload's parameters as JSON (for the result file).
    pub fn params_json(&self) -> serde_json::Value {
        let v = match self {
            Workload::Kv(w) => serde_json::to_value(&w.params),
            Workload::Lms(w) => serde_json::to_value(&w.params),
            Workload::Exam(w) => serde_json::to_value(&w.params),
        };
        v.unwrap_or(serde_json::Value::Null)
    }

    /// Command-line name.
    pub fn name(&self) -> &'static str {
        match self {
            Workload::Kv(_) => "kv",
            Workload::Lms(_) => "lms",
            Workload::Exam(_) => "exam",
        }
    }

    /// The name of the unit whose latency is the headline figure.
    pub fn unit_name(&self) -> &'static str {
        match self {
            Workload::Kv(_) => "op",
            Workload::Lms(_) => "journey",
            Workload::Exam(_) => "post_answer",
        }
    }

    /// Name of the open-loop response-time histogram of the unit.
    pub fn response_name(&self) -> &'static str {
        match self {
            Workload::Kv(_) => "op.response_time",
            Workload::Lms(_) => "journey.response_time",
            Workload::Exam(_) => "post_answer.response_time",
        }
    }

    /// Whether an op name is one request/response exchange with the server (for ops/s).
    pub fn is_protocol_op(name: &str) -> bool {
        matches!(
            name,
            "session_open"
                | "session_close"
                | "cache_get"
                | "cache_mget"
                | "cache_set"
                | "read"
                | "update"
                | "proctor_poll"
        )
    }

    /// Pages in one journey (lms only).
    pub fn pages_per_journey(&self) -> Option<usize> {
        match self {
            Workload::Lms(_) => Some(lms::PAGES.len()),
            _ => None,
        }
    }

    /// Connections each user (or open-loop slot) holds.
    pub fn conns_per_user(&self) -> usize {
        match self {
            Workload::Lms(w) if w.params.ajax_ratio > 0.0 => 2,
            _ => 1,
        }
    }

    /// Whether the generic loop thinks between units (lms thinks between pages itself).
    pub fn think_between_units(&self) -> bool {
        matches!(self, Workload::Kv(_))
    }

    /// Whether the workload supports the open loop.
    pub fn supports_open_loop(&self) -> bool {
        !matches!(self, Workload::Exam(_))
    }

    /// Loads the data the workload reads (cache entries, records, questions).
    pub async fn prepare(&self, endpoints: &Endpoints, tag: &str) -> Result<()> {
        match self {
            Workload::Kv(w) => w.prepare(endpoints, tag).await,
            Workload::Lms(w) => w.prepare(&mut endpoints.connect().await?).await,
            Workload::Exam(w) => w.prepare(&mut endpoints.connect().await?).await,
        }
    }

    /// Starts the closed-loop users.
    pub fn spawn_closed(&self, ctx: &Arc<RunCtx>, users: usize) -> Vec<JoinHandle<()>> {
        match self {
            Workload::Exam(w) => exam::spawn(ctx, w.clone(), users),
            _ => (0..users)
                .map(|u| tokio::spawn(crate::run::closed_user(ctx.clone(), self.clone(), u, users)))
                .collect(),
        }
    }

    /// Runs one unit; returns its latency in microseconds.
    #[allow(clippy::too_many_arguments)]
    pub async fn run_unit(
        &self,
        ctx: &RunCtx,
        conns: &mut Conns,
        user: usize,
        seq: u64,
        rng: &mut SmallRng,
        steps: &mut Vec<Step>,
        in_window: bool,
    ) -> std::result::Result<u64, UnitError> {
        match self {
            Workload::Kv(w) => w.unit(ctx, &mut conns[0], rng, steps, in_window).await,
            Workload::Lms(w) => {
                w.journey(ctx, conns, user, seq, rng, steps, in_window)
                    .await
            }
            Workload::Exam(_) => Err(UnitError {
                op: "unit",
                error: BenchError::Input(
                    "exam is a closed-loop workload with its own roles".into(),
                ),
            }),
        }
    }
}

/// What a page does with the values of a cache (multi-)get of `keys` in `definition`: inside
/// the measuring window it counts hits and misses and checks each hit against `expected(key)`
/// (a wrong value is counted and reported as "`describe(key)`: wrong content"); for each miss
/// it spends `regen` of CPU rebuilding the value and stores it, as the application would.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn use_cached(
    ctx: &RunCtx,
    client: &mut Client,
    steps: &mut Vec<Step>,
    in_window: bool,
    (definition, keys, values): (&str, &[String], Vec<Option<bytes::Bytes>>),
    expected: impl Fn(&str) -> Vec<u8>,
    describe: impl Fn(&str) -> String,
    regen: Duration,
) -> std::result::Result<(), UnitError> {
    let counters = &ctx.collector.counters;
    for (key, value) in keys.iter().zip(values) {
        match value {
            Some(v) => {
                if in_window {
                    Counters::add(&counters.cache_hits, 1);
                    if v.as_ref() != expected(key).as_slice() {
                        Counters::add(&counters.value_mismatches, 1);
                        ctx.collector
                            .mismatch(format!("{}: wrong content", describe(key)));
                    }
                }
            }
            None => {
                if in_window {
                    Counters::add(&counters.cache_misses, 1);
                }
                burn_cpu(regen);
                let value = expected(key);
                let t = Instant::now();
                client
                    .cache_set(definition, key, &value)
                    .await
                    .map_err(|error| UnitError {
                        op: "cache_set",
                        error,
                    })?;
                steps.push(("cache_set", micros(t.elapsed())));
                if in_window {
                    Counters::add(&counters.cache_regenerated, 1);
                }
            }
        }
    }
    Ok(())
}

/// The traffic of a user's connections so far, per layer (`None` when one is not counted).
pub(crate) fn conns_wire(conns: &[Client]) -> Option<crate::target::LayerWire> {
    conns
        .iter()
        .try_fold(crate::target::LayerWire::default(), |acc, c| {
            c.wire().map(|w| acc.plus(w))
        })
}

/// Records one unit's (or page's) traffic as three steps named by `names` (sent, received,
/// round trips). Histograms hold values from 1: a zero is recorded as 1 only when there was no
/// traffic at all, which a unit that reached the store never has.
pub(crate) fn push_wire(steps: &mut Vec<Step>, names: [&'static str; 3], w: WireSnapshot) {
    steps.push((names[0], w.sent.max(1)));
    steps.push((names[1], w.received.max(1)));
    steps.push((names[2], w.round_trips.max(1)));
}

/// Spins for `d` (the application's cost of rebuilding a cache value), deliberately on the
/// worker thread like PHP would.
pub(crate) fn burn_cpu(d: Duration) {
    let until = Instant::now() + d;
    let mut x = 0u64;
    while Instant::now() < until {
        for i in 0..64u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
    }
}
