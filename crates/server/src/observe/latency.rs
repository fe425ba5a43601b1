//! Redis' latency monitor: per event, the last 160 one-second samples of the worst latency seen
//! in that second (milliseconds), and the worst of all time. Redis' events `command` and
//! `fast-command`; Gradus adds `fsync` (a log fsync, sampled once a second) and `lock-wait` (a
//! connection waiting for a session lock).
//!
//! The mutex is taken only when an event passes `latency-monitor-threshold` (and by LATENCY).
//!
//! May import: nothing of the server but [`super::unix_seconds`].

use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;

/// Redis' `LATENCY_TS_LEN`.
const SAMPLES: usize = 160;

/// One second's worst latency of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub time: u64,
    pub millis: u64,
}

/// An event's samples and all-time figures.
#[derive(Debug, Clone, Default)]
pub struct Series {
    pub samples: VecDeque<Sample>,
    pub max: u64,
}

/// The latency monitor of a server.
#[derive(Default)]
pub struct LatencyMonitor {
    events: Mutex<BTreeMap<&'static str, Series>>,
}

impl LatencyMonitor {
    /// Add a sample of `event` now (Redis' `latencyAddSample`).
    pub fn add_sample(&self, event: &'static str, millis: u64) {
        self.add_sample_at(event, millis, super::unix_seconds());
    }

    fn add_sample_at(&self, event: &'static str, millis: u64, time: u64) {
        let mut events = self.events.lock();
        let series = events.entry(event).or_default();
        series.max = series.max.max(millis);
        match series.samples.back_mut() {
            Some(last) if last.time == time => last.millis = last.millis.max(millis),
            _ => {
                series.samples.push_back(Sample { time, millis });
                if series.samples.len() > SAMPLES {
                    series.samples.pop_front();
                }
            }
        }
    }

    /// Every event with its latest sample and all-time worst, by name.
    pub fn latest(&self) -> Vec<(&'static str, Sample, u64)> {
        self.events
            .lock()
            .iter()
            .filter_map(|(name, s)| s.samples.back().map(|last| (*name, *last, s.max)))
            .collect()
    }

    /// The samples of `event`, oldest first (empty when it has none).
    pub fn history(&self, event: &[u8]) -> Vec<Sample> {
        self.events
            .lock()
            .iter()
            .find(|(name, _)| name.as_bytes() == event)
            .map(|(_, s)| s.samples.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Forget the events named (all when `names` is empty); returns how many were forgotten.
    pub fn reset(&self, names: &[&[u8]]) -> usize {
        let mut events = self.events.lock();
        if names.is_empty() {
            let n = events.len();
            events.clear();
            return n;
        }
        let before = events.len();
        events.retain(|name, _| !names.contains(&name.as_bytes()));
        before - events.len()
    }

    /// A copy of every series.
    pub fn all(&self) -> BTreeMap<&'static str, Series> {
        self.events.lock().clone()
    }

    /// LATENCY DOCTOR: a report for people (`threshold_ms` 0: the monitor is off).
    pub fn doctor(&self, threshold_ms: u64) -> String {
        if threshold_ms == 0 {
            return "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Gradus instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it.\n".into();
        }
        let events = self.all();
        if events.is_empty() {
            return "Dave, no latency spike was observed during the lifetime of this Gradus instance, not in the slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and think things over.\n".into();
        }
        let mut out = String::from(
            "Dave, I have observed latency spikes in this Gradus instance. You don't mind talking about it, do you Dave?\n\n",
        );
        for (i, (name, s)) in events.iter().enumerate() {
            let n = s.samples.len() as u64;
            let avg = s.samples.iter().map(|x| x.millis).sum::<u64>() / n.max(1);
            let mean_dev = s
                .samples
                .iter()
                .map(|x| x.millis.abs_diff(avg))
                .sum::<u64>()
                / n.max(1);
            let period = match (s.samples.front(), s.samples.back()) {
                (Some(a), Some(b)) if n > 1 => (b.time - a.time) as f64 / (n - 1) as f64,
                _ => 0.0,
            };
            let _ = writeln!(
                out,
                "{}. {name}: {n} latency spikes (average {avg}ms, mean deviation {mean_dev}ms, period {period:.2} sec). Worst all time event {}ms.",
                i + 1,
                s.max
            );
        }
        out.push_str("\nI have a few advices for you:\n\n");
        for name in events.keys() {
            let advice = match *name {
                "command" | "fast-command" => "- Check SLOWLOG GET for the commands that ran long: O(N) commands on big values (KEYS, SMEMBERS, LRANGE 0 -1, SORT) block their shard; prefer SCAN and bounded ranges.",
                "fsync" => "- Log fsyncs are slow: the disk under the data directory is the limit. Strict writes wait for them; keyspaces that can take a bounded loss window run faster at the background degree.",
                "expire-cycle" => "- Active expiry took long: many keys expiring at the same moment, or big values expiring (their memory is given back by the reclaim thread, but each key is still removed under its shard's lock). Spread TTLs with some jitter.",
                "lock-wait" => "- Connections wait long for session locks: a page holds its session lock for the whole request. Set LOCK ... MAXWAITERS to fail redirect loops early and a LEASE so a hung worker cannot block a user.",
                _ => "- See the README's observability section for this event.",
            };
            out.push_str(advice);
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sample_per_second_keeps_the_worst_and_the_last_160() {
        let m = LatencyMonitor::default();
        m.add_sample_at("command", 5, 100);
        m.add_sample_at("command", 9, 100);
        m.add_sample_at("command", 3, 101);
        assert_eq!(
            m.history(b"command"),
            vec![
                Sample {
                    time: 100,
                    millis: 9
                },
                Sample {
                    time: 101,
                    millis: 3
                }
            ]
        );
        assert_eq!(
            m.latest(),
            vec![(
                "command",
                Sample {
                    time: 101,
                    millis: 3
                },
                9
            )]
        );
        for t in 0..200 {
            m.add_sample_at("fsync", 1, 1000 + t);
        }
        assert_eq!(m.history(b"fsync").len(), SAMPLES);
        assert_eq!(m.reset(&[b"fsync", b"nope"]), 1);
        assert_eq!(m.reset(&[]), 1);
        assert!(m.latest().is_empty());
    }
}
