//! Measurement: HDR histograms per operation (microsecond resolution, three significant digits,
//! up to one hour — fixed memory whatever the run length), error counts, and the counters the
//! workloads keep (lock waits, session verification, cache hits). Workers buffer the samples of
//! one journey and hand them over in one call when it completes, so a journey is counted whole
//! or not at all and every count adds up. No I/O here and no knowledge of targets.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::Serialize;

/// Most distinct error kinds kept apart in the result.
const MAX_ERROR_KINDS: usize = 100;

/// Largest latency a histogram holds, in microseconds (one hour); larger values are clamped.
const MAX_US: u64 = 3_600_000_000;

/// A fresh histogram with the crate's bounds.
pub fn new_histogram() -> Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts; a failure here is a programming error.
    Histogram::new_with_bounds(1, MAX_US, 3).expect("valid histogram bounds")
}

/// Microseconds of `d`, at least 1 (the histogram's lowest value).
pub fn micros(d: Duration) -> u64 {
    (d.as_micros() as u64).clamp(1, MAX_US)
}

/// Latency figures of one operation, in microseconds.
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct LatencySummary {
    /// Successful operations measured.
    pub count: u64,
    /// Failed operations (not in the percentiles).
    pub errors: u64,
    /// Fastest.
    pub min_us: u64,
    /// Mean.
    pub avg_us: f64,
    /// Median.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// Slowest.
    pub max_us: u64,
    /// Standard deviation.
    pub stdev_us: f64,
}

impl LatencySummary {
    /// Summarises `h` (plus an error count).
    pub fn of(h: &Histogram<u64>, errors: u64) -> LatencySummary {
        if h.is_empty() {
            return LatencySummary {
                errors,
                ..LatencySummary::default()
            };
        }
        LatencySummary {
            count: h.len(),
            errors,
            min_us: h.min(),
            avg_us: h.mean(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
            stdev_us: h.stdev(),
        }
    }
}

/// One measured step inside a unit of work: operation name and latency in microseconds.
pub type Step = (&'static str, u64);

struct OpStat {
    hist: Histogram<u64>,
    errors: u64,
}

/// Counters shared by all workers of one measurement point. All are counted only for work that
/// started inside the measured window.
#[derive(Debug, Default)]
pub struct Counters {
    /// Units (journeys, kv operations) completed and measured.
    pub units: AtomicU64,
    /// Units abandoned after an error (lock timeout, error reply, broken connection).
    pub abandoned: AtomicU64,
    /// Units still running when the drain period after the end ran out.
    pub cut_at_end: AtomicU64,
    /// Open loop: arrivals refused because too many were already waiting.
    pub dropped_arrivals: AtomicU64,
    /// Session locks acquired.
    pub lock_acquisitions: AtomicU64,
    /// Acquisitions that had to wait for another request of the same session.
    pub lock_waits: AtomicU64,
    /// Failed polling attempts (`SET NX`/`add` that found the lock taken).
    pub lock_polls: AtomicU64,
    /// Lock waits that ran out.
    pub lock_timeouts: AtomicU64,
    /// Sessions read back whose content matched what the bench last wrote.
    pub sessions_verified: AtomicU64,
    /// Sessions read back with other content (or missing).
    pub session_mismatches: AtomicU64,
    /// Sessions written.
    pub sessions_written: AtomicU64,
    /// Application-cache reads that found a value.
    pub cache_hits: AtomicU64,
    /// Application-cache reads that found nothing.
    pub cache_misses: AtomicU64,
    /// Values regenerated and written after a miss.
    pub cache_regenerated: AtomicU64,
    /// Cache or kv values whose content did not belong to the key read.
    pub value_mismatches: AtomicU64,
    /// Sessions read by proctors (exam).
    pub proctor_sessions_seen: AtomicU64,
}

impl Counters {
    /// Adds `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// Everything measured at one point, shared by the workers (one mutex, taken once per unit).
pub struct Collector {
    ops: Mutex<BTreeMap<&'static str, OpStat>>,
    lock_wait_hist: Mutex<Histogram<u64>>,
    /// Progress: latencies of the main unit since the last progress line, whatever the window.
    progress_hist: Mutex<Histogram<u64>>,
    progress_ops: AtomicU64,
    /// Counters.
    pub counters: Counters,
    first_mismatch: Mutex<Option<String>>,
    errors_by_kind: Mutex<BTreeMap<String, u64>>,
}

impl Default for Collector {
    fn default() -> Self {
        Collector::new()
    }
}

impl Collector {
    /// An empty collector.
    pub fn new() -> Collector {
        Collector {
            ops: Mutex::new(BTreeMap::new()),
            lock_wait_hist: Mutex::new(new_histogram()),
            progress_hist: Mutex::new(new_histogram()),
            progress_ops: AtomicU64::new(0),
            counters: Counters::default(),
            first_mismatch: Mutex::new(None),
            errors_by_kind: Mutex::new(BTreeMap::new()),
        }
    }

    /// Hands over the steps of one completed unit. `unit` is the unit's own name and latency
    /// (e.g. `("journey", us)`), also fed to the progress line. Only recorded for the result
    /// when `in_window`; always counted for progress.
    pub fn commit(&self, steps: &[Step], unit: Option<Step>, in_window: bool) {
        let exchanges = steps
            .iter()
            .filter(|(name, _)| crate::workload::Workload::is_protocol_op(name))
            .count();
        self.progress_ops
            .fetch_add(exchanges as u64, Ordering::Relaxed);
        if let Some((_, us)) = unit {
            let _ = self.progress_hist.lock().record(us);
        }
        if !in_window {
            return;
        }
        let mut ops = self.ops.lock();
        for &(name, us) in steps.iter().chain(unit.iter()) {
            let stat = ops.entry(name).or_insert_with(|| OpStat {
                hist: new_histogram(),
                errors: 0,
            });
            stat.hist.saturating_record(us);
        }
        if unit.is_some() {
            Counters::add(&self.counters.units, 1);
        }
    }

    /// Records a latency that is not a step of a unit (open-loop response time).
    pub fn record_extra(&self, name: &'static str, us: u64) {
        self.ops
            .lock()
            .entry(name)
            .or_insert_with(|| OpStat {
                hist: new_histogram(),
                errors: 0,
            })
            .hist
            .saturating_record(us);
    }

    /// [`Collector::record_extra`] for work that started in the measured window only.
    pub fn record_extra_if(&self, name: &'static str, us: u64, in_window: bool) {
        if in_window {
            self.record_extra(name, us);
        }
    }

    /// Counts a failed operation named `op` (when `in_window`), with the error's text.
    pub fn error(&self, op: &'static str, error: &crate::error::BenchError, in_window: bool) {
        if !in_window {
            return;
        }
        let mut ops = self.ops.lock();
        ops.entry(op)
            .or_insert_with(|| OpStat {
                hist: new_histogram(),
                errors: 0,
            })
            .errors += 1;
        drop(ops);
        let mut kinds = self.errors_by_kind.lock();
        let mut kind = error_kind(error);
        // Bounded: texts of unexpected replies vary; past a hundred kinds they share one entry.
        if kinds.len() >= MAX_ERROR_KINDS && !kinds.contains_key(&kind) {
            kind = "other errors".into();
        }
        *kinds.entry(kind).or_insert(0) += 1;
    }

    /// Records how long a contended lock acquisition took.
    pub fn lock_wait(&self, us: u64) {
        self.lock_wait_hist.lock().saturating_record(us);
        Counters::add(&self.counters.lock_waits, 1);
    }

    /// Notes a verification failure (the first one is kept verbatim for the report).
    pub fn mismatch(&self, what: String) {
        let mut first = self.first_mismatch.lock();
        if first.is_none() {
            *first = Some(what);
        }
    }

    /// Operations completed (all, for progress) and the main unit's P90 since the last call,
    /// which starts a new progress interval.
    pub fn progress_tick(&self) -> (u64, Option<u64>) {
        let mut h = self.progress_hist.lock();
        let p90 = (!h.is_empty()).then(|| h.value_at_quantile(0.9));
        h.reset();
        (self.progress_ops.load(Ordering::Relaxed), p90)
    }

    /// Per-operation summaries.
    pub fn summaries(&self) -> BTreeMap<String, LatencySummary> {
        self.ops
            .lock()
            .iter()
            .map(|(name, s)| (name.to_string(), LatencySummary::of(&s.hist, s.errors)))
            .collect()
    }

    /// Summary of contended lock acquisitions.
    pub fn lock_wait_summary(&self) -> LatencySummary {
        LatencySummary::of(&self.lock_wait_hist.lock(), 0)
    }

    /// The first verification failure seen, if any.
    pub fn first_mismatch(&self) -> Option<String> {
        self.first_mismatch.lock().clone()
    }

    /// Errors by kind (their message without per-instance details).
    pub fn errors_by_kind(&self) -> BTreeMap<String, u64> {
        self.errors_by_kind.lock().clone()
    }
}

/// A stable label for an error, so counts group (e.g. all lock timeouts together).
fn error_kind(e: &crate::error::BenchError) -> String {
    use crate::error::BenchError::*;
    match e {
        LockTimeout(_) => "lock timeout".into(),
        Timeout(..) => "reply timeout".into(),
        Closed => "connection closed".into(),
        Io(_) => "i/o error".into(),
        Connect { .. } => "connect failed".into(),
        Server(msg) => format!(
            "error reply: {}",
            msg.split_whitespace().next().unwrap_or("ERR")
        ),
        other => other.to_string().chars().take(60).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_counts_whole_units_in_window_only() {
        let c = Collector::new();
        c.commit(
            &[("cache_get", 10), ("cache_get", 30), ("page", 50)],
            Some(("journey", 45)),
            true,
        );
        c.commit(&[("cache_get", 1000)], Some(("journey", 1000)), false);
        let s = c.summaries();
        assert_eq!(s["cache_get"].count, 2);
        assert_eq!(s["journey"].count, 1);
        let g = &s["cache_get"];
        assert!(g.min_us <= g.p50_us && g.p50_us <= g.max_us);
        assert_eq!(Counters::get(&c.counters.units), 1);
        let (ops, p90) = c.progress_tick();
        // Protocol exchanges only: the page step is not one.
        assert_eq!(ops, 3);
        assert!(p90.is_some());
        assert_eq!(c.progress_tick().1, None);
    }

    #[test]
    fn errors_are_grouped_by_kind() {
        let c = Collector::new();
        c.error(
            "session_open",
            &crate::error::BenchError::LockTimeout(Duration::from_secs(1)),
            true,
        );
        c.error("session_open", &crate::error::BenchError::Closed, false);
        assert_eq!(c.summaries()["session_open"].errors, 1);
        assert_eq!(c.errors_by_kind()["lock timeout"], 1);
    }
}
