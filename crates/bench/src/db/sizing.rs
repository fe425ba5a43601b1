//! Memory scenarios for the database targets: the buffer pool (InnoDB), block cache (RocksDB)
//! or `shared_buffers` (PostgreSQL) sized to a share — 100 %, 50 %, 10 %, … — of the data the
//! run will hold. The data is estimated before the run from the workload's parameters:
//!
//! * `lms`: the cache table (`definitions × cache_keys × (value + key)`), the rows added by
//!   regenerated misses (`pages × mean cache reads × miss ratio × value`), and the session rows
//!   (one per journey, `session_max` bytes), with `pages = users × seconds / (think + 20 ms)`;
//! * `kv`: `records × (value + key)`; `exam`: questions, answers and sessions of every student.
//!
//! The payload is doubled for pages, indexes and free space ([`OVERHEAD`]); the bytes on disk
//! after the run (in the result) show how close that came. Pure arithmetic; no I/O.

use crate::target::TargetSpec;
use crate::workload::lms::DEFINITIONS;
use crate::workload::Workload;

/// Payload to on-disk size factor assumed for the estimate.
pub const OVERHEAD: u64 = 2;

/// Bytes of key and row header per row, roughly.
const ROW_OVERHEAD: u64 = 48;

/// Estimated size of the data (sessions + cache) of a run, bytes.
pub fn estimate_data_bytes(workload: &Workload, users: usize, seconds: f64, think_ms: f64) -> u64 {
    let users = users.max(1) as f64;
    let payload = match workload {
        Workload::Lms(w) => {
            let p = &w.params;
            let value = p.cache_value_size as u64 + ROW_OVERHEAD;
            let cache = DEFINITIONS.len() as u64 * p.cache_keys * value;
            let pages = users * seconds / ((think_ms + 20.0) / 1000.0);
            let mean_reads = (p.cache_reads_min + p.cache_reads_max) as f64 / 2.0;
            let misses = pages * mean_reads * (1.0 - p.hit_ratio) * value as f64;
            let sessions = pages / 13.0 * (p.session_max as u64 + ROW_OVERHEAD) as f64;
            cache + (misses + sessions) as u64
        }
        Workload::Kv(w) => w.params.records * (w.params.value_size as u64 + ROW_OVERHEAD),
        Workload::Exam(w) => {
            let p = &w.params;
            let questions = (p.groups * p.questions_per_group * (p.question_size + 48)) as u64;
            let answers = users as u64 * (p.groups * p.answer_max) as u64;
            questions + 2 * answers
        }
    };
    payload * OVERHEAD
}

/// Expands every database target without a memory share into one target per share in `pcts`,
/// then sets `memory_bytes` of every target that has a share.
pub fn apply_scenarios(targets: &mut Vec<TargetSpec>, pcts: &[u32], data_bytes: u64) {
    if !pcts.is_empty() {
        let mut expanded = Vec::with_capacity(targets.len() * pcts.len());
        for t in targets.drain(..) {
            if t.kind.is_database() && t.memory_pct.is_none() && t.addr.is_none() {
                for &pct in pcts {
                    let mut s = t.clone();
                    s.memory_pct = Some(pct);
                    expanded.push(s);
                }
            } else {
                expanded.push(t);
            }
        }
        *targets = expanded;
    }
    for t in targets.iter_mut() {
        if let Some(pct) = t.memory_pct {
            t.memory_bytes = Some(data_bytes * u64::from(pct) / 100);
            t.data_estimate_bytes = Some(data_bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_expand_only_databases_and_scale_linearly() {
        let mut targets: Vec<TargetSpec> = ["postgres:on", "redis:always", "mariadb:relaxed/mem30"]
            .iter()
            .map(|t| TargetSpec::parse(t).unwrap())
            .collect();
        apply_scenarios(&mut targets, &[100, 10], 1_000_000);
        let labels: Vec<String> = targets.iter().map(|t| t.label()).collect();
        assert_eq!(
            labels,
            [
                "postgres:on/mem100",
                "postgres:on/mem10",
                "redis:always",
                "mariadb:relaxed/mem30"
            ]
        );
        let bytes: Vec<Option<u64>> = targets.iter().map(|t| t.memory_bytes).collect();
        assert_eq!(bytes, [Some(1_000_000), Some(100_000), None, Some(300_000)]);
    }
}
