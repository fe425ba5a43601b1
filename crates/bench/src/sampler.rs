//! Resource sampling of the server process from `/proc`, once a second: CPU user and system time
//! (`/proc/pid/stat`), resident memory (`/proc/pid/status` `VmRSS`) and proportional memory
//! (`/proc/pid/smaps_rollup` `Pss`), bytes read from and sent to the block layer and read/write
//! system calls (`/proc/pid/io` `read_bytes`, `write_bytes`, `syscr`, `syscw`), and open sockets
//! (entries of `/proc/pid/fd` that link to `socket:`); plus the machine's disk operations
//! (`/proc/diskstats`, reads and writes completed on whole disks — system-wide, so other work on
//! the machine shows in them too). fsync calls are not visible in `/proc`; the summary says so
//! rather than guessing. A server made of several processes (PostgreSQL's postmaster and its
//! backends) is summed over the process and its live descendants, plus the CPU time of children
//! that have exited (`cutime`, `cstime`). RSS summed that way counts shared memory (PostgreSQL's
//! `shared_buffers`) once per process that maps it; PSS divides each shared page among the
//! processes mapping it, so the sum of PSS counts it once — the memory figures to read are the
//! PSS ones. Linux only; no dependency on workloads or targets. A run attached with `--addr` has
//! no pid and reports resources as unavailable.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;

const MEMORY_NOTE: &str = "rss_* sum each process' resident set (memory shared between the \
     server's processes counted once per process); pss_* sum proportional set sizes from \
     /proc/<pid>/smaps_rollup, which count shared memory once";
const DISK_NOTE: &str = "read_bytes and read_syscalls are the server's (/proc/<pid>/io); disk \
     operations are the machine's whole disks (/proc/diskstats), other work included";

/// At most this many samples are kept per measurement (an hour at one a second); later ones
/// are counted but dropped, so memory stays bounded.
const MAX_SAMPLES: usize = 3600;

/// One reading of the process' counters (cumulative since the process started, except RSS and
/// sockets which are levels).
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct Sample {
    /// Seconds since the sampler started.
    pub t_s: f64,
    /// CPU time in user mode, seconds.
    pub cpu_user_s: f64,
    /// CPU time in kernel mode, seconds.
    pub cpu_sys_s: f64,
    /// Resident set size, bytes.
    pub rss_bytes: u64,
    /// Proportional set size (shared pages divided among their mappers), bytes; 0 when
    /// `smaps_rollup` cannot be read.
    pub pss_bytes: u64,
    /// Bytes the process caused to be read from storage (`read_bytes`).
    pub read_bytes: u64,
    /// Read-type system calls (`syscr`).
    pub read_syscalls: u64,
    /// Reads completed by the machine's disks (`/proc/diskstats`, system-wide).
    pub disk_reads: u64,
    /// Writes completed by the machine's disks (system-wide).
    pub disk_writes: u64,
    /// Bytes the process caused to be sent to storage (`write_bytes`).
    pub write_bytes: u64,
    /// Write-type system calls (`syscw`).
    pub write_syscalls: u64,
    /// Open socket file descriptors.
    pub sockets: u64,
}

/// Reads one sample of `pid` and its descendants, `None` when the process is gone (or a
/// zombie).
pub fn read_sample(pid: u32, t_s: f64) -> Option<Sample> {
    let mut total = read_one(pid, t_s, true)?;
    let (reads, writes) = disk_ops();
    total.disk_reads = reads;
    total.disk_writes = writes;
    let mut stack = children(pid);
    let mut seen = 0;
    while let Some(child) = stack.pop() {
        seen += 1;
        if seen > 10_000 {
            break;
        }
        if let Some(s) = read_one(child, t_s, false) {
            total.cpu_user_s += s.cpu_user_s;
            total.cpu_sys_s += s.cpu_sys_s;
            total.rss_bytes += s.rss_bytes;
            total.pss_bytes += s.pss_bytes;
            total.read_bytes += s.read_bytes;
            total.read_syscalls += s.read_syscalls;
            total.write_bytes += s.write_bytes;
            total.write_syscalls += s.write_syscalls;
            total.sockets += s.sockets;
        }
        stack.extend(children(child));
    }
    Some(total)
}

/// `pid` and its live descendants.
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let mut stack = children(pid);
    while let Some(c) = stack.pop() {
        if out.len() > 10_000 {
            break;
        }
        out.push(c);
        stack.extend(children(c));
    }
    out
}

/// Child processes of `pid` (from every thread's `children` list).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.filter_map(|t| t.ok()) {
            if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
                out.extend(
                    list.split_whitespace()
                        .filter_map(|p| p.parse::<u32>().ok()),
                );
            }
        }
    }
    out
}

/// One process; with `with_reaped_children`, the CPU time of its exited children is included.
fn read_one(pid: u32, t_s: f64, with_reaped_children: bool) -> Option<Sample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name (which may contain spaces).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
        return None;
    }
    // utime and stime are fields 14 and 15 of the full line: 12 and 13 after the name.
    let ticks = clock_ticks();
    let mut utime: f64 = fields.get(11)?.parse::<u64>().ok()? as f64 / ticks;
    let mut stime: f64 = fields.get(12)?.parse::<u64>().ok()? as f64 / ticks;
    if with_reaped_children {
        // cutime and cstime: fields 16 and 17 of the full line.
        let field = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0) as f64
                / ticks
        };
        utime += field(13);
        stime += field(14);
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    let io_field = |name: &str| {
        io.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let sockets = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .map(|t| t.to_string_lossy().starts_with("socket:"))
                        .unwrap_or(false)
                })
                .count() as u64
        })
        .unwrap_or(0);
    let pss_kib = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("Pss:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0);
    Some(Sample {
        t_s,
        cpu_user_s: utime,
        cpu_sys_s: stime,
        rss_bytes: rss_kib * 1024,
        pss_bytes: pss_kib * 1024,
        read_bytes: io_field("read_bytes:"),
        read_syscalls: io_field("syscr:"),
        disk_reads: 0,
        disk_writes: 0,
        write_bytes: io_field("write_bytes:"),
        write_syscalls: io_field("syscw:"),
        sockets,
    })
}

/// Reads and writes completed by the machine's whole disks (devices listed in `/sys/block`,
/// loop and RAM devices excluded), from `/proc/diskstats`.
pub fn disk_ops() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/diskstats").unwrap_or_default();
    parse_diskstats(&text, |name| {
        !name.starts_with("loop")
            && !name.starts_with("ram")
            && std::path::Path::new(&format!("/sys/block/{name}")).exists()
    })
}

/// Sums fields 4 (reads completed) and 8 (writes completed) of the devices `whole_disk` accepts.
fn parse_diskstats(text: &str, whole_disk: impl Fn(&str) -> bool) -> (u64, u64) {
    let mut reads = 0;
    let mut writes = 0;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || !whole_disk(f[2]) {
            continue;
        }
        reads += f[3].parse::<u64>().unwrap_or(0);
        writes += f[7].parse::<u64>().unwrap_or(0);
    }
    (reads, writes)
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// A background thread sampling one process every `interval`.
pub struct Sampler {
    pid: u32,
    started: Instant,
    stop: Arc<AtomicBool>,
    gone: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling `pid`.
    pub fn start(pid: u32, interval: Duration) -> Sampler {
        let started = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let gone = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, gone, samples) = (stop.clone(), gone.clone(), samples.clone());
            std::thread::Builder::new()
                .name("proc-sampler".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match read_sample(pid, started.elapsed().as_secs_f64()) {
                            Some(s) => {
                                let mut v = samples.lock();
                                if v.len() < MAX_SAMPLES {
                                    v.push(s);
                                }
                            }
                            None => {
                                gone.store(true, Ordering::Relaxed);
                                return;
                            }
                        }
                        // Sleep in small steps so stop() is quick.
                        let until = Instant::now() + interval;
                        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                })
                .ok()
        };
        Sampler {
            pid,
            started,
            stop,
            gone,
            samples,
            thread,
        }
    }

    /// True once the sampled process has exited.
    pub fn process_gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }

    /// A reading taken now (for exact window edges), `None` if the process is gone.
    pub fn now(&self) -> Option<Sample> {
        read_sample(self.pid, self.started.elapsed().as_secs_f64())
    }

    /// Stops the thread and summarises the window between the readings `start` and `end`
    /// (taken with [`Sampler::now`]), using the periodic samples in between.
    pub fn finish(mut self, start: Option<Sample>, end: Option<Sample>) -> Resources {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let all = std::mem::take(&mut *self.samples.lock());
        let (Some(start), Some(end)) = (start, end) else {
            return Resources::unavailable(
                "the server process exited during the run; no complete resource window",
            );
        };
        let mut window: Vec<Sample> = all
            .into_iter()
            .filter(|s| s.t_s > start.t_s && s.t_s < end.t_s)
            .collect();
        window.insert(0, start);
        window.push(end);
        let secs = (end.t_s - start.t_s).max(1e-9);
        let user = end.cpu_user_s - start.cpu_user_s;
        let sys = end.cpu_sys_s - start.cpu_sys_s;
        let writes = end.write_bytes.saturating_sub(start.write_bytes);
        let syscw = end.write_syscalls.saturating_sub(start.write_syscalls);
        let reads = end.read_bytes.saturating_sub(start.read_bytes);
        let syscr = end.read_syscalls.saturating_sub(start.read_syscalls);
        let disk_r = end.disk_reads.saturating_sub(start.disk_reads);
        let disk_w = end.disk_writes.saturating_sub(start.disk_writes);
        let n = window.len() as f64;
        Resources {
            available: true,
            reason: None,
            pid: Some(self.pid),
            window_s: secs,
            cpu_user_s: user,
            cpu_sys_s: sys,
            cpu_percent_of_one_core: (user + sys) / secs * 100.0,
            rss_max_bytes: window.iter().map(|s| s.rss_bytes).max().unwrap_or(0),
            rss_avg_bytes: (window.iter().map(|s| s.rss_bytes as f64).sum::<f64>() / n) as u64,
            pss_max_bytes: window.iter().map(|s| s.pss_bytes).max().unwrap_or(0),
            pss_avg_bytes: (window.iter().map(|s| s.pss_bytes as f64).sum::<f64>() / n) as u64,
            memory_note: MEMORY_NOTE.into(),
            read_bytes: reads,
            read_bytes_per_s: reads as f64 / secs,
            read_syscalls_per_s: syscr as f64 / secs,
            disk_read_ops_per_s: disk_r as f64 / secs,
            disk_write_ops_per_s: disk_w as f64 / secs,
            disk_note: DISK_NOTE.into(),
            write_bytes: writes,
            write_bytes_per_s: writes as f64 / secs,
            write_syscalls: syscw,
            write_syscalls_per_s: syscw as f64 / secs,
            fsyncs: None,
            fsync_note:
                "fsync calls are not visible in /proc; write_syscalls counts write-type calls"
                    .into(),
            sockets_max: window.iter().map(|s| s.sockets).max().unwrap_or(0),
            sockets_avg: window.iter().map(|s| s.sockets as f64).sum::<f64>() / n,
            samples: window,
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Resource use of the server over the measured window.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Resources {
    /// False when there is no process to sample (`--addr`) or it vanished.
    pub available: bool,
    /// Why figures are missing, when they are.
    pub reason: Option<String>,
    /// The sampled process.
    pub pid: Option<u32>,
    /// Length of the window, seconds.
    pub window_s: f64,
    /// User CPU seconds spent in the window.
    pub cpu_user_s: f64,
    /// System CPU seconds spent in the window.
    pub cpu_sys_s: f64,
    /// (user + system) / window, in percent of one core.
    pub cpu_percent_of_one_core: f64,
    /// Highest RSS seen.
    pub rss_max_bytes: u64,
    /// Mean RSS over the samples.
    pub rss_avg_bytes: u64,
    /// Highest PSS seen (shared memory counted once; see `memory_note`).
    pub pss_max_bytes: u64,
    /// Mean PSS over the samples.
    pub pss_avg_bytes: u64,
    /// How the memory figures count shared memory.
    pub memory_note: String,
    /// Bytes read from storage in the window (page-cache hits are not reads).
    pub read_bytes: u64,
    /// The same per second.
    pub read_bytes_per_s: f64,
    /// Read-type system calls per second.
    pub read_syscalls_per_s: f64,
    /// Reads completed by the machine's disks per second (system-wide).
    pub disk_read_ops_per_s: f64,
    /// Writes completed by the machine's disks per second (system-wide).
    pub disk_write_ops_per_s: f64,
    /// What the disk figures cover.
    pub disk_note: String,
    /// Bytes written to storage in the window.
    pub write_bytes: u64,
    /// The same per second.
    pub write_bytes_per_s: f64,
    /// Write-type system calls in the window.
    pub write_syscalls: u64,
    /// The same per second.
    pub write_syscalls_per_s: f64,
    /// Always `null`: not observable from `/proc`.
    pub fsyncs: Option<u64>,
    /// Why `fsyncs` is null.
    pub fsync_note: String,
    /// Most open sockets seen.
    pub sockets_max: u64,
    /// Mean open sockets over the samples.
    pub sockets_avg: f64,
    /// The readings themselves (window start, one a second, window end).
    pub samples: Vec<Sample>,
}

impl Resources {
    /// Figures that could not be taken, with the reason.
    pub fn unavailable(reason: &str) -> Resources {
        Resources {
            available: false,
            reason: Some(reason.to_string()),
            ..Resources::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_this_process() {
        let s = read_sample(std::process::id(), 0.0).expect("own /proc entry");
        assert!(s.rss_bytes > 0);
        assert!(s.cpu_user_s + s.cpu_sys_s >= 0.0);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let with_socket = read_sample(std::process::id(), 0.0).unwrap();
        assert!(with_socket.sockets >= 1);
        drop(listener);
    }

    #[test]
    fn diskstats_sum_whole_disks_only() {
        let text = "   8       0 sda 100 0 800 50 40 0 320 60 0 90 110\n   8       1 sda1 90 0 700 45 35 0 300 55 0 80 100\n   7       0 loop0 5 0 10 1 0 0 0 0 0 1 1\n";
        assert_eq!(parse_diskstats(text, |n| n == "sda"), (100, 40));
    }

    #[test]
    fn pss_counts_this_process() {
        let s = read_sample(std::process::id(), 0.0).unwrap();
        // PSS is at most RSS; 0 only where smaps_rollup is missing (kernels before 4.14).
        assert!(s.pss_bytes <= s.rss_bytes);
        if std::path::Path::new("/proc/self/smaps_rollup").exists() {
            assert!(s.pss_bytes > 0);
        }
    }

    #[test]
    fn missing_process_gives_none() {
        assert!(read_sample(u32::MAX - 1, 0.0).is_none());
    }
}
