//! Starting and stopping the servers under test. Each managed server runs as a child process in a
//! fresh temporary directory, with a known configuration given on its command line, listening on
//! a free loopback port; it is stopped with SIGTERM (SIGKILL after a grace period) and its
//! directory removed when the [`ManagedServer`] is stopped or dropped, so no run leaves a process
//! behind. Knows the command lines of `gradus`, `redis-server` and `memcached` (the databases'
//! come from `db::launch`; the `files` store is a directory with no process); can restart a
//! server in place (clean stop or `kill -9`, same port and data) for fault runs. Nothing about
//! workloads or measurement.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{BenchError, Result};
use crate::target::{TargetKind, TargetSpec};

/// Where to find the server binaries.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// The `gradus` binary.
    pub gradus: PathBuf,
    /// `redis-server` (looked up on `PATH` when bare).
    pub redis: PathBuf,
    /// `memcached` (looked up on `PATH` when bare).
    pub memcached: PathBuf,
}

impl Binaries {
    /// Defaults: `gradus` next to the running executable, the others from `PATH`.
    pub fn defaults() -> Binaries {
        let gradus = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("gradus")))
            .unwrap_or_else(|| PathBuf::from("gradus"));
        Binaries {
            gradus,
            redis: PathBuf::from("redis-server"),
            memcached: PathBuf::from("memcached"),
        }
    }
}

/// How a managed server was started (recorded in the result).
#[derive(Debug, Clone, Serialize)]
pub struct LaunchRecord {
    /// The executable's path.
    pub binary: String,
    /// Its full argument list.
    pub args: Vec<String>,
    /// The first line of `binary --version` (or `-V`).
    pub version_output: String,
    /// Process id.
    pub pid: u32,
}

/// A server process owned by the benchmark.
pub struct ManagedServer {
    child: Option<Child>,
    /// `127.0.0.1:port` (for `files`: the store's directory).
    pub addr: String,
    dir: PathBuf,
    log_path: PathBuf,
    /// What was started.
    pub launch: LaunchRecord,
    /// Run the process as this (uid, gid) (PostgreSQL when the tool runs as root).
    run_as: Option<(u32, u32)>,
    /// A file that must say `ready` before the server counts as up (PostgreSQL).
    ready_file: Option<PathBuf>,
    /// The signal of a clean shutdown.
    stop_signal: i32,
    /// What the ready probe sends (memcached `version`, RESP `PING`); `None`: connect only.
    probe: Option<&'static [u8]>,
}

/// How long a restart took (fault runs).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RestartTiming {
    /// From the signal to the process having exited, seconds.
    pub stop_s: f64,
    /// From the new process's start until it accepted connections, seconds.
    pub start_s: f64,
}

/// Whether a failed start is worth another attempt on another port.
enum Retry {
    Yes,
    No,
}

static DIR_SEQ: AtomicU64 = AtomicU64::new(0);

/// A new empty directory under the system temp dir.
fn temp_dir(label: &str) -> Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "gradus-bench-{}-{}-{}-{nanos}",
        label.replace([':', '+', '@', '/'], "_"),
        std::process::id(),
        DIR_SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// A loopback port nobody listens on right now (the OS picks it; the server binds it moments
/// later — a rare collision shows up as a start failure and is retried).
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

fn version_line(binary: &Path, flag: &str) -> String {
    match Command::new(binary)
        .arg(flag)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
    {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string(),
        Err(_) => String::new(),
    }
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(8)..].join(" | ");
    if tail.is_empty() {
        "(no output)".to_string()
    } else {
        tail
    }
}

impl ManagedServer {
    /// Starts the server for `spec` and waits (at most `ready_timeout`) until it accepts
    /// connections. Tries a few ports if the first one is taken in the meantime.
    pub fn start(spec: &TargetSpec, bins: &Binaries, ready_timeout: Duration) -> Result<Self> {
        let mut last = None;
        for _ in 0..3 {
            match Self::start_once(spec, bins, ready_timeout) {
                Ok(s) => return Ok(s),
                // The binary could not be run at all: trying another port will not help.
                Err((e, Retry::No)) => return Err(e),
                Err((e, Retry::Yes)) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| BenchError::ServerStart {
            what: spec.label(),
            detail: "no attempt made".into(),
        }))
    }

    fn start_once(
        spec: &TargetSpec,
        bins: &Binaries,
        ready_timeout: Duration,
    ) -> std::result::Result<Self, (BenchError, Retry)> {
        let no_retry = |e: BenchError| (e, Retry::No);
        let dir = temp_dir(&spec.label()).map_err(no_retry)?;
        let port = free_port().map_err(no_retry)?.to_string();
        let data_dir = dir.join("data");
        std::fs::create_dir_all(&data_dir).map_err(|e| no_retry(e.into()))?;
        let data = data_dir.to_string_lossy().into_owned();
        if spec.kind == TargetKind::Files {
            return Ok(ManagedServer {
                child: None,
                addr: data,
                log_path: dir.join("server.log"),
                dir,
                launch: LaunchRecord {
                    binary: String::new(),
                    args: Vec::new(),
                    version_output: "files (in-process, no server)".into(),
                    pid: 0,
                },
                run_as: None,
                ready_file: None,
                stop_signal: libc::SIGTERM,
                probe: None,
            });
        }
        if spec.kind.is_database() {
            let memory = spec
                .memory_bytes
                .unwrap_or(crate::db::launch::DEFAULT_MEMORY);
            let port_num = port.parse::<u16>().unwrap_or(0);
            let launch = match crate::db::launch::prepare(spec, &dir, port_num, memory) {
                Ok(l) => l,
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err((e, Retry::No));
                }
            };
            return Self::spawn_and_wait(
                spec,
                dir,
                port,
                launch.binary,
                launch.args,
                launch.version_output,
                launch.run_as,
                launch.ready_file,
                launch.stop_signal,
                None,
                ready_timeout,
            );
        }
        let (binary, args, version_flag): (&Path, Vec<String>, &str) = match spec.kind {
            TargetKind::Gradus => {
                let degree = spec.degree.clone().unwrap_or_else(|| "background".into());
                let args = [
                    "--bind",
                    "127.0.0.1",
                    "--port",
                    &port,
                    // RESP only: a memcached listener on the default 11211 could clash.
                    "--memcached-port",
                    "0",
                    "--dir",
                    &data,
                    "--durability",
                    &degree,
                    "--loglevel",
                    "warn",
                ];
                (&bins.gradus, args.map(String::from).to_vec(), "--version")
            }
            TargetKind::Redis => {
                let fsync = spec.degree.clone().unwrap_or_else(|| "everysec".into());
                let args = [
                    "--bind",
                    "127.0.0.1",
                    "--port",
                    &port,
                    "--dir",
                    &data,
                    "--save",
                    "",
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    &fsync,
                    "--daemonize",
                    "no",
                    "--protected-mode",
                    "yes",
                    "--maxclients",
                    "10000",
                    "--loglevel",
                    "warning",
                ];
                (&bins.redis, args.map(String::from).to_vec(), "--version")
            }
            TargetKind::Memcached => {
                let args = [
                    "-l",
                    "127.0.0.1",
                    "-p",
                    &port,
                    "-U",
                    "0",
                    "-m",
                    "1024",
                    "-c",
                    "10000",
                    "-t",
                    "4",
                    "-u",
                    "root",
                ];
                let mut args = args.map(String::from).to_vec();
                // `-u` is only accepted (and needed) when running as root.
                // SAFETY: getuid has no preconditions and cannot fail.
                if unsafe { libc::getuid() } != 0 {
                    args.truncate(args.len() - 2);
                }
                (&bins.memcached, args, "-V")
            }
            other => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err((
                    BenchError::Input(format!("{other:?} is started elsewhere")),
                    Retry::No,
                ));
            }
        };
        let version = version_line(binary, version_flag);
        let probe: &'static [u8] = match spec.kind {
            TargetKind::Memcached => b"version\r\n",
            _ => b"*1\r\n$4\r\nPING\r\n",
        };
        Self::spawn_and_wait(
            spec,
            dir,
            port,
            binary.to_path_buf(),
            args,
            version,
            None,
            None,
            libc::SIGTERM,
            Some(probe),
            ready_timeout,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn spawn_and_wait(
        spec: &TargetSpec,
        dir: PathBuf,
        port: String,
        binary: PathBuf,
        args: Vec<String>,
        version_output: String,
        run_as: Option<(u32, u32)>,
        ready_file: Option<PathBuf>,
        stop_signal: i32,
        probe: Option<&'static [u8]>,
        ready_timeout: Duration,
    ) -> std::result::Result<Self, (BenchError, Retry)> {
        let binary = binary.as_path();
        let log_path = dir.join("server.log");
        let spawned = File::create(&log_path)
            .and_then(|log| Ok((log.try_clone()?, log)))
            .map_err(BenchError::from)
            .and_then(|(out, err)| {
                Self::spawn(binary, &args, &dir, run_as, out, err).map_err(|e| {
                    BenchError::ServerStart {
                        what: binary.display().to_string(),
                        detail: format!("{e} (install it, or point the tool at it)"),
                    }
                })
            });
        let child = match spawned {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err((e, Retry::No));
            }
        };
        let launch = LaunchRecord {
            binary: binary.display().to_string(),
            args,
            version_output,
            pid: child.id(),
        };
        let mut server = ManagedServer {
            child: Some(child),
            addr: format!("127.0.0.1:{port}"),
            dir,
            log_path,
            launch,
            run_as,
            ready_file,
            stop_signal,
            probe,
        };
        // A port taken by someone else in the meantime shows up here: worth another try.
        server
            .wait_ready(&spec.label(), ready_timeout)
            .map_err(|e| (e, Retry::Yes))?;
        Ok(server)
    }

    fn spawn(
        binary: &Path,
        args: &[String],
        dir: &Path,
        run_as: Option<(u32, u32)>,
        out: File,
        err: File,
    ) -> std::io::Result<Child> {
        // Its own process group: a Ctrl-C at the terminal reaches only the bench, which then
        // stops the server itself (and removes its directory).
        let mut cmd = Command::new(binary);
        cmd.process_group(0)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        if let Some((uid, gid)) = run_as {
            cmd.uid(uid).gid(gid).env("HOME", "/tmp");
        }
        cmd.spawn()
    }

    /// Polls until the port answers a ping (`PING` / `version`), or fails early if the process
    /// exits.
    fn wait_ready(&mut self, what: &str, timeout: Duration) -> Result<()> {
        use std::io::{Read, Write};
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exit_status() {
                return Err(BenchError::ServerStart {
                    what: what.to_string(),
                    detail: format!("exited with {status}: {}", log_tail(&self.log_path)),
                });
            }
            let file_ready = self
                .ready_file
                .as_deref()
                .is_none_or(crate::db::launch::ready_file_says_ready);
            if let (true, Ok(addr)) = (file_ready, self.addr.parse()) {
                if let Ok(mut s) =
                    std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200))
                {
                    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                    let mut buf = [0u8; 64];
                    match self.probe {
                        // Databases greet first (MariaDB) or need a startup packet
                        // (PostgreSQL, whose readiness the pid file tells): a connection is it.
                        None => return Ok(()),
                        Some(probe) => {
                            if s.write_all(probe).is_ok()
                                && matches!(s.read(&mut buf), Ok(n) if n > 0)
                            {
                                return Ok(());
                            }
                        }
                    }
                }
            }
            if Instant::now() > deadline {
                return Err(BenchError::ServerStart {
                    what: what.to_string(),
                    detail: format!(
                        "not answering on {} after {timeout:?}: {}",
                        self.addr,
                        log_tail(&self.log_path)
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The process id, `None` for a store without a process (`files`).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|_| self.launch.pid)
    }

    /// Bytes the server's directory takes on disk (allocated blocks), for the space report.
    pub fn disk_bytes(&self) -> u64 {
        fn walk(p: &Path) -> u64 {
            use std::os::unix::fs::MetadataExt;
            let Ok(meta) = std::fs::symlink_metadata(p) else {
                return 0;
            };
            let own = meta.blocks() * 512;
            if meta.is_dir() {
                own + std::fs::read_dir(p)
                    .map(|rd| rd.filter_map(|e| e.ok()).map(|e| walk(&e.path())).sum())
                    .unwrap_or(0)
            } else {
                own
            }
        }
        walk(&self.dir.join("data"))
    }

    /// The server's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The data directory's space split into logs and table data (see [`DiskUsage`]).
    pub fn disk_usage(&self) -> DiskUsage {
        disk_usage(&self.dir.join("data"))
    }

    /// Stops the server (`kill -9` of its process group when `kill`, else its clean shutdown
    /// signal) and starts it again with the same command line, port and data; returns how long
    /// each half took. Errors when the server cannot be restarted (e.g. `files`).
    pub fn restart(&mut self, kill: bool, ready_timeout: Duration) -> Result<RestartTiming> {
        let Some(mut child) = self.child.take() else {
            return Err(BenchError::Input(
                "no server process to restart (files store)".into(),
            ));
        };
        let pid = child.id() as libc::pid_t;
        let started = Instant::now();
        // SAFETY: signalling our own child (and its process group, which it leads).
        unsafe {
            if kill {
                libc::kill(-pid, libc::SIGKILL);
                libc::kill(pid, libc::SIGKILL);
            } else {
                libc::kill(pid, self.stop_signal);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Ok(None) = child.try_wait() {
            if Instant::now() > deadline {
                let _ = child.kill();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.wait();
        if kill {
            // Whatever was left of the group (PostgreSQL backends) goes too.
            // SAFETY: as above; the group may be empty, then this fails harmlessly.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        let stop_s = started.elapsed().as_secs_f64();
        if let Some(f) = &self.ready_file {
            let _ = std::fs::remove_file(f);
        }
        let restarted = Instant::now();
        let log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.log_path)?;
        let child = Self::spawn(
            Path::new(&self.launch.binary),
            &self.launch.args,
            &self.dir,
            self.run_as,
            log.try_clone()?,
            log,
        )?;
        self.launch.pid = child.id();
        self.child = Some(child);
        let what = format!("{} (restarted)", self.launch.binary);
        self.wait_ready(&what, ready_timeout)?;
        Ok(RestartTiming {
            stop_s,
            start_s: restarted.elapsed().as_secs_f64(),
        })
    }

    /// `Some(description)` once the process has exited.
    pub fn exit_status(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            _ => None,
        }
    }

    /// The last lines of the server's own output.
    pub fn log_tail(&self) -> String {
        log_tail(&self.log_path)
    }

    /// SIGTERM, then SIGKILL after `grace`; reaps the process and removes its directory.
    pub fn stop(&mut self, grace: Duration) {
        if let Some(mut child) = self.child.take() {
            if let Ok(None) = child.try_wait() {
                let pid = child.id() as libc::pid_t;
                // SAFETY: sending a signal to our own child, whose pid is valid until reaped.
                unsafe {
                    libc::kill(pid, self.stop_signal);
                }
                let deadline = Instant::now() + grace;
                while Instant::now() < deadline {
                    if let Ok(Some(_)) = child.try_wait() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                if let Ok(None) = child.try_wait() {
                    // SAFETY: as above; the whole group, so no database backend outlives it.
                    unsafe {
                        libc::kill(-pid, libc::SIGKILL);
                    }
                    let _ = child.kill();
                }
            }
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// Kills the server at once (for fault runs and tests of the partial-result path).
    pub fn kill_now(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
        }
    }
}

impl Drop for ManagedServer {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// Space a data directory takes on disk (allocated blocks), logs and table data apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DiskUsage {
    /// Everything.
    pub total_bytes: u64,
    /// Write-ahead and redo logs, binary logs, append-only files and servers' text logs: Gradus
    /// `wal-*.log`, InnoDB `ib_logfile*`, `binlog.*`, `aria_log*`, RocksDB `*.log` and `LOG*`,
    /// PostgreSQL `pg_wal/`, Redis `appendonly*`.
    pub log_bytes: u64,
    /// The rest: tablespaces, SST files, heap files, snapshots, catalogs.
    pub data_bytes: u64,
}

/// True for a file that is a log rather than table data (see [`DiskUsage::log_bytes`]).
pub fn is_log_file(path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    name.ends_with(".log")
        || name.starts_with("ib_logfile")
        || name.starts_with("binlog.")
        || name.starts_with("aria_log")
        || name.starts_with("appendonly")
        || name == "LOG"
        || name.starts_with("LOG.old")
        || path.components().any(|c| {
            matches!(
                c.as_os_str().to_str(),
                Some("pg_wal") | Some("appendonlydir")
            )
        })
}

/// Walks `dir`, adding allocated blocks into logs or data.
pub fn disk_usage(dir: &Path) -> DiskUsage {
    fn walk(p: &Path, out: &mut DiskUsage, depth: usize) {
        use std::os::unix::fs::MetadataExt;
        let Ok(meta) = std::fs::symlink_metadata(p) else {
            return;
        };
        let own = meta.blocks() * 512;
        out.total_bytes += own;
        if meta.is_dir() {
            out.data_bytes += own;
            if depth < 32 {
                if let Ok(rd) = std::fs::read_dir(p) {
                    for e in rd.filter_map(|e| e.ok()) {
                        walk(&e.path(), out, depth + 1);
                    }
                }
            }
        } else if is_log_file(p) {
            out.log_bytes += own;
        } else {
            out.data_bytes += own;
        }
    }
    let mut out = DiskUsage::default();
    walk(dir, &mut out, 0);
    out
}

#[cfg(test)]
mod disk_tests {
    use super::*;

    #[test]
    fn logs_and_data_are_told_apart() {
        for log in [
            "wal-00000000000000000001.log",
            "ib_logfile0",
            "binlog.000001",
            "#rocksdb/000012.log",
            "#rocksdb/LOG",
            "pg_wal/000000010000000000000001",
            "appendonlydir/appendonly.aof.1.incr.aof",
        ] {
            assert!(is_log_file(Path::new(log)), "{log}");
        }
        for data in [
            "ibdata1",
            "gradus/cache.ibd",
            "#rocksdb/000010.sst",
            "#rocksdb/MANIFEST-000005",
            "base/16384/2619",
            "dump.rdb",
        ] {
            assert!(!is_log_file(Path::new(data)), "{data}");
        }
        let dir = std::env::temp_dir().join(format!("gradus-bench-du-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("pg_wal")).unwrap();
        std::fs::write(dir.join("pg_wal").join("seg"), vec![1u8; 8192]).unwrap();
        std::fs::write(dir.join("table"), vec![1u8; 4096]).unwrap();
        let u = disk_usage(&dir);
        assert!(u.log_bytes >= 8192 && u.data_bytes >= 4096, "{u:?}");
        assert_eq!(u.total_bytes, u.log_bytes + u.data_bytes);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
