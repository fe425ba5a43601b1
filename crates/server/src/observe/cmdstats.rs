//! Per-command statistics: calls, microseconds, failed and rejected calls, and an HDR histogram
//! of each command's latency (Redis' `INFO commandstats` and `latencystats`; the metrics
//! endpoint's per-family counters and histograms are sums of these).
//!
//! Cost on the request path: each worker thread owns a [`Shard`] (found through a thread-local)
//! and records into it under its own mutex, which only a reader (INFO, a scrape, RESETSTAT)
//! ever contends for; there is no lock or cache line shared by every thread per command.
//! Histograms are created on a command's first call (an HDR histogram of 1 ns–1 s at 2
//! significant figures, as Redis keeps per command, is some 24 KiB).
//!
//! Counters never go back: `CONFIG RESETSTAT` records a baseline that INFO subtracts, so
//! Prometheus sees counters that only grow.
//!
//! May import: `command` (the table's rows). Nothing else.

use super::Outcome;
use crate::command::{table, CommandSpec};
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Histogram range, as Redis' `latencystats`: 1 ns to 1 s (longer values count as 1 s), 2
/// significant figures.
const HIST_MIN_NS: u64 = 1;
const HIST_MAX_NS: u64 = 1_000_000_000;
const HIST_SIGFIG: u8 = 2;

/// One command row's figures.
#[derive(Clone, Default)]
pub struct Cell {
    pub calls: u64,
    pub usec: u64,
    pub failed: u64,
    pub rejected: u64,
    /// Latencies in nanoseconds (None until the first call).
    pub hist: Option<Histogram<u64>>,
}

impl Cell {
    fn add(&mut self, other: &Cell) {
        self.calls += other.calls;
        self.usec += other.usec;
        self.failed += other.failed;
        self.rejected += other.rejected;
        if let Some(h) = &other.hist {
            match &mut self.hist {
                Some(mine) => {
                    let _ = mine.add(h);
                }
                None => self.hist = Some(h.clone()),
            }
        }
    }

    fn subtract(&mut self, base: &Cell) {
        self.calls = self.calls.saturating_sub(base.calls);
        self.usec = self.usec.saturating_sub(base.usec);
        self.failed = self.failed.saturating_sub(base.failed);
        self.rejected = self.rejected.saturating_sub(base.rejected);
        if let (Some(mine), Some(h)) = (&mut self.hist, &base.hist) {
            if mine.subtract(h).is_err() {
                mine.reset();
            }
        }
    }

    /// True when nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.calls == 0 && self.failed == 0 && self.rejected == 0
    }
}

/// One worker thread's figures, by row index (see [`crate::command::CommandTable::row_index`]).
pub struct Shard {
    cells: Vec<Cell>,
}

/// Every shard of one server, and the RESETSTAT baseline.
pub struct CommandStats {
    /// Tells this server's shards from another's in the same process (tests run several).
    id: u64,
    shards: Mutex<Vec<Arc<Mutex<Shard>>>>,
    baseline: Mutex<Vec<Cell>>,
    /// `latency-tracking`: record each call's latency in its row's histogram.
    tracking: std::sync::atomic::AtomicBool,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's shard of each server it has run commands for (one, outside tests).
    static LOCAL: RefCell<Vec<(u64, Arc<Mutex<Shard>>)>> = const { RefCell::new(Vec::new()) };
}

impl Default for CommandStats {
    fn default() -> Self {
        Self::new()
    }
}

impl CommandStats {
    pub fn new() -> Self {
        Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            shards: Mutex::new(Vec::new()),
            baseline: Mutex::new(Vec::new()),
            tracking: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// Record latencies in the histograms from now on, or not (`latency-tracking`).
    pub fn set_tracking(&self, on: bool) {
        self.tracking.store(on, Ordering::Relaxed);
    }

    /// Count one command (see [`Outcome`]) in this thread's shard, made and registered on
    /// the thread's first command.
    pub fn record(&self, row: &'static CommandSpec, elapsed: Duration, outcome: Outcome) {
        let index = table().row_index(row);
        LOCAL.with(|local| {
            let mut local = local.borrow_mut();
            let at = match local.iter().position(|(id, _)| *id == self.id) {
                Some(at) => at,
                None => {
                    let shard = Arc::new(Mutex::new(Shard {
                        cells: vec![Cell::default(); table().row_count()],
                    }));
                    self.shards.lock().push(shard.clone());
                    local.push((self.id, shard));
                    local.len() - 1
                }
            };
            let mut shard = local[at].1.lock();
            let cell = &mut shard.cells[index];
            match outcome {
                Outcome::Rejected => {
                    cell.rejected += 1;
                    return;
                }
                Outcome::Failed => cell.failed += 1,
                Outcome::Ok => {}
            }
            cell.calls += 1;
            let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
            cell.usec += nanos / 1000;
            if !self.tracking.load(Ordering::Relaxed) {
                return;
            }
            let hist = cell.hist.get_or_insert_with(|| {
                Histogram::new_with_bounds(HIST_MIN_NS, HIST_MAX_NS, HIST_SIGFIG)
                    .expect("valid histogram bounds")
            });
            hist.saturating_record(nanos.max(HIST_MIN_NS));
        })
    }

    /// Every row's figures since start, summed over the shards (index: row index).
    pub fn totals(&self) -> Vec<Cell> {
        let shards: Vec<Arc<Mutex<Shard>>> = self.shards.lock().clone();
        let mut out = vec![Cell::default(); table().row_count()];
        for shard in shards {
            let shard = shard.lock();
            for (total, cell) in out.iter_mut().zip(&shard.cells) {
                if !cell.is_empty() {
                    total.add(cell);
                }
            }
        }
        out
    }

    /// Every row's figures since the last RESETSTAT (what INFO shows).
    pub fn since_reset(&self) -> Vec<Cell> {
        let mut cells = self.totals();
        let baseline = self.baseline.lock();
        for (cell, base) in cells.iter_mut().zip(baseline.iter()) {
            cell.subtract(base);
        }
        cells
    }

    /// CONFIG RESETSTAT: INFO counts from now on.
    pub fn reset(&self) {
        let totals = self.totals();
        *self.baseline.lock() = totals;
    }
}

/// A value at `percentile` of a histogram of nanoseconds, in microseconds (as Redis prints it).
pub fn percentile_usec(hist: &Histogram<u64>, percentile: f64) -> f64 {
    hist.value_at_percentile(percentile) as f64 / 1000.0
}

/// `LATENCY HISTOGRAM`'s buckets of a histogram of nanoseconds, as Redis' `fillCommandCDF`
/// walks it (an HDR logarithmic iteration from 1024 ns, doubling): for each level, the
/// highest value equivalent to it in microseconds and how many values are at most that, only
/// where that count grew, up to the level that holds them all.
pub fn cumulative_buckets_usec(hist: &Histogram<u64>) -> Vec<(u64, u64)> {
    let total = hist.len();
    let mut out = Vec::new();
    let mut previous = 0;
    let mut level: u64 = 1024;
    while previous < total && level <= HIST_MAX_NS.saturating_mul(4) {
        let high = hist.highest_equivalent(level);
        let cumulative = hist.count_between(0, high);
        if cumulative > previous {
            out.push((high / 1000, cumulative));
            previous = cumulative;
        }
        level *= 2;
    }
    out
}

/// `latency-tracking-info-percentiles` read: numbers from 0 to 100 separated by spaces (empty:
/// none), Redis' errors otherwise.
pub fn parse_percentiles(text: &str) -> Result<Vec<f64>, String> {
    text.split_whitespace()
        .map(|word| {
            let p: f64 = word
                .parse()
                .ok()
                .filter(|p: &f64| p.is_finite())
                .ok_or("Invalid latency-tracking-info-percentiles parameters")?;
            if !(0.0..=100.0).contains(&p) {
                return Err(
                    "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"
                        .to_string(),
                );
            }
            Ok(p)
        })
        .collect()
}

/// Percentiles as CONFIG GET shows them, and as INFO latencystats names them (`99.9`, `50`).
pub fn percentiles_text(percentiles: &[f64]) -> String {
    percentiles
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The settings table's check of `latency-tracking-info-percentiles`: its canonical form.
pub fn normalize_percentiles(text: &str) -> Result<String, String> {
    parse_percentiles(text).map(|p| percentiles_text(&p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn row(name: &str) -> &'static CommandSpec {
        let args = [Bytes::from(name.to_string())];
        table().get(&args[0]).expect("in the table").resolve(&args)
    }

    #[test]
    fn records_sum_over_threads_and_reset_keeps_counters_monotonic() {
        let stats = Arc::new(CommandStats::new());
        let get = row("get");
        stats.record(get, Duration::from_micros(5), Outcome::Ok);
        let other = stats.clone();
        std::thread::spawn(move || {
            other.record(get, Duration::from_micros(7), Outcome::Failed);
            other.record(get, Duration::ZERO, Outcome::Rejected);
        })
        .join()
        .unwrap();
        let i = table().row_index(get);
        let t = &stats.totals()[i];
        assert_eq!((t.calls, t.usec, t.failed, t.rejected), (2, 12, 1, 1));
        assert_eq!(t.hist.as_ref().map(|h| h.len()), Some(2));
        stats.reset();
        stats.record(get, Duration::from_micros(3), Outcome::Ok);
        let s = &stats.since_reset()[i];
        assert_eq!((s.calls, s.usec, s.failed, s.rejected), (1, 3, 0, 0));
        assert_eq!(s.hist.as_ref().map(|h| h.len()), Some(1));
        assert_eq!(stats.totals()[i].calls, 3, "totals never go back");
    }

    #[test]
    fn latency_histogram_buckets_are_redis_power_of_two_levels() {
        let mut h = Histogram::<u64>::new_with_bounds(HIST_MIN_NS, HIST_MAX_NS, HIST_SIGFIG)
            .expect("valid bounds");
        for ns in [500, 900, 1_500, 3_000, 20_000, 20_000] {
            h.record(ns).expect("in range");
        }
        // Redis 7.0.15 prints these levels for such samples: 1, 2, 4, … 16, 33 µs.
        assert_eq!(
            cumulative_buckets_usec(&h),
            vec![(1, 2), (2, 3), (4, 4), (33, 6)]
        );
    }
}
