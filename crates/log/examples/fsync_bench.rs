//! Measures the log on real files (OsStorage): fsync latency, group-commit batch sizes and
//! throughput per degree. Not a benchmark of record (those live in `gradus-bench` runs); a
//! quick look at what this machine's disk gives the writer.
//!
//! ```text
//! cargo run --release -p gradus-log --example fsync_bench [DIR]
//! ```
//! DIR defaults to a fresh directory under the system temp dir (removed afterwards); point it
//! at the disk the server will use, since fsync cost is a property of the device.

use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use bytes::Bytes;
use gradus_log::{Durability, Log, LogOptions, LogStats, OsStorage};

const PAYLOAD: usize = 256;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn open(dir: &PathBuf) -> Log {
    let _ = std::fs::remove_dir_all(dir);
    let (log, _) =
        Log::open(LogOptions::new(dir), Arc::new(OsStorage::default())).expect("open log");
    log
}

fn delta(after: &LogStats, before: &LogStats) -> (u64, u64, u64, u64) {
    (
        after.fsyncs - before.fsyncs,
        after.total_fsync_micros - before.total_fsync_micros,
        after.records_synced - before.records_synced,
        after.commit_fsyncs - before.commit_fsyncs,
    )
}

fn strict_threads(dir: &PathBuf, threads: usize, per_thread: usize) {
    let log = open(dir);
    let before = log.stats();
    let barrier = Arc::new(Barrier::new(threads));
    let payload = Bytes::from(vec![b'x'; PAYLOAD]);
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (log, barrier, payload) = (log.clone(), barrier.clone(), payload.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let mut latencies = Vec::with_capacity(per_thread);
                for _ in 0..per_thread {
                    let t = Instant::now();
                    let lsn = log.append(payload.clone(), Durability::Strict).unwrap();
                    assert!(log
                        .wait_durable_blocking(lsn, Duration::from_secs(60))
                        .unwrap());
                    latencies.push(t.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies: Vec<Duration> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    let elapsed = started.elapsed();
    latencies.sort();
    let after = log.stats();
    let (fsyncs, fsync_us, records, commits) = delta(&after, &before);
    println!(
        "strict  threads={threads:<3} records={:<6} fsyncs={fsyncs:<5} records/fsync={:<6.1} \
         fsync mean={:<6.0}us max={:<6}us  append→durable p50={:?} p99={:?}  {:.0} rec/s",
        threads * per_thread,
        records as f64 / commits.max(1) as f64,
        fsync_us as f64 / fsyncs.max(1) as f64,
        after.max_fsync_micros,
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        (threads * per_thread) as f64 / elapsed.as_secs_f64(),
    );
    log.close().unwrap();
}

fn unsynced_degree(dir: &PathBuf, degree: Durability, records: usize) {
    let log = open(dir);
    let before = log.stats();
    let payload = Bytes::from(vec![b'y'; PAYLOAD]);
    let started = Instant::now();
    let mut last = 0;
    for _ in 0..records {
        last = log.append(payload.clone(), degree).unwrap();
    }
    let append_time = started.elapsed();
    let durable_at = if degree == Durability::Background {
        while log.durable_lsn() < last {
            std::thread::sleep(Duration::from_micros(200));
        }
        Some(started.elapsed())
    } else {
        None
    };
    let (fsyncs, _, synced, commits) = delta(&log.stats(), &before);
    println!(
        "{degree:<10} records={records} appended in {append_time:?} ({:.0} rec/s), fsyncs={fsyncs}, \
         records/fsync={:.1}{}",
        records as f64 / append_time.as_secs_f64(),
        synced as f64 / commits.max(1) as f64,
        durable_at.map_or(String::new(), |d| format!(", all durable after {d:?}")),
    );
    log.close().unwrap();
}

fn main() {
    let (dir, remove) = match std::env::args().nth(1) {
        Some(d) => (PathBuf::from(d), false),
        None => (
            std::env::temp_dir().join(format!("gradus-log-bench-{}", std::process::id())),
            true,
        ),
    };
    println!("log directory: {}", dir.display());
    println!("payload: {PAYLOAD} bytes");
    for threads in [1, 4, 16, 64] {
        let per_thread = (2000 / threads).max(50);
        strict_threads(&dir, threads, per_thread);
    }
    unsynced_degree(&dir, Durability::Background, 100_000);
    unsynced_degree(&dir, Durability::Lazy, 100_000);
    if remove {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
