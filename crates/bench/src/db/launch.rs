//! Creating and configuring the databases the tool starts itself, each in its own temporary
//! directory on a free loopback port:
//!
//! * MariaDB / MyRocks: `mariadb-install-db --no-defaults --datadir=…`, then `mariadbd
//!   --no-defaults` with every setting on its command line (durable: InnoDB
//!   `innodb_flush_log_at_trx_commit=1`, binary log on with `sync_binlog=1`; relaxed: `=2` and
//!   no binary log; relaxed0: `=0` and no binary log; MyRocks: the RocksDB plugin, `default_storage_engine=rocksdb` and the same
//!   split through `rocksdb_flush_log_at_trx_commit`). Grant tables are skipped: the server only
//!   listens on 127.0.0.1 and the bench is its only client.
//! * PostgreSQL: `initdb -U postgres --auth=trust`, then `postgres -D … -p … -k <dir> -c
//!   listen_addresses=127.0.0.1 -c synchronous_commit=on|off`. PostgreSQL refuses to run as
//!   root: when the tool runs as root, both run as the `postgres` system user (created by the
//!   Debian package) in a directory handed to that user.
//!
//! The memory scenarios size InnoDB's buffer pool, RocksDB's block cache (both with direct
//! reads, so the OS page cache does not stand in for them) or PostgreSQL's `shared_buffers`
//! (which cannot bypass the page cache) to a share of the data. This module only builds command
//! lines and runs the one-off initialisation; `server` spawns and stops the processes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{BenchError, Result};
use crate::target::{TargetKind, TargetSpec};

/// Smallest InnoDB buffer pool / RocksDB block cache the tool asks for.
pub const MIN_MARIADB_MEMORY: u64 = 8 << 20;
/// Smallest `shared_buffers` the tool asks for (PostgreSQL's floor is 128 kB).
pub const MIN_PG_MEMORY: u64 = 1 << 20;
/// Pool size used when no memory scenario is given: the databases' own defaults are 128 MiB.
pub const DEFAULT_MEMORY: u64 = 128 << 20;

/// How to run one database server.
#[derive(Debug, Clone)]
pub struct DbLaunch {
    /// The server executable.
    pub binary: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// `binary --version`.
    pub version_output: String,
    /// Run as this (uid, gid) instead of the tool's own user.
    pub run_as: Option<(u32, u32)>,
    /// A file whose content says the server is ready (PostgreSQL's `postmaster.pid` ends its
    /// status line with `ready`).
    pub ready_file: Option<PathBuf>,
    /// The signal for a clean, prompt shutdown (PostgreSQL's SIGTERM waits for clients to
    /// leave; SIGINT is its "fast" shutdown).
    pub stop_signal: i32,
}

/// Finds `name` on `PATH`, in `/usr/sbin` and `/usr/bin`, then in `/usr/lib/postgresql/*/bin`
/// (newest first).
pub fn find_binary(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.push("/usr/sbin".into());
    dirs.push("/usr/bin".into());
    if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut versions: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .collect();
        versions.sort_by_key(|p| {
            std::cmp::Reverse(
                p.parent()
                    .and_then(|v| v.file_name())
                    .and_then(|v| v.to_str())
                    .and_then(|v| v.parse::<u32>().ok())
                    .unwrap_or(0),
            )
        });
        dirs.extend(versions);
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

fn need(name: &str, package: &str) -> Result<PathBuf> {
    find_binary(name).ok_or_else(|| BenchError::ServerStart {
        what: name.to_string(),
        detail: format!("not found on PATH, /usr/sbin or /usr/lib/postgresql/*/bin (install {package}; scripts/install-deps.sh does)"),
    })
}

/// True when every binary the target needs is installed (tests skip otherwise).
pub fn available(kind: TargetKind) -> bool {
    match kind {
        TargetKind::Postgres => {
            find_binary("initdb").is_some() && find_binary("postgres").is_some()
        }
        TargetKind::Mariadb => {
            find_binary("mariadb-install-db").is_some() && find_binary("mariadbd").is_some()
        }
        TargetKind::Myrocks => {
            available(TargetKind::Mariadb)
                && [
                    "/usr/lib/mysql/plugin/ha_rocksdb.so",
                    "/usr/lib/x86_64-linux-gnu/mariadb19/plugin/ha_rocksdb.so",
                ]
                .iter()
                .any(|p| Path::new(p).exists())
        }
        _ => true,
    }
}

fn version_of(binary: &Path) -> String {
    Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The `postgres` system user's uid and gid.
fn postgres_user() -> Result<(u32, u32)> {
    let name = std::ffi::CString::new("postgres").map_err(|e| BenchError::Input(e.to_string()))?;
    // SAFETY: getpwnam with a valid C string; the returned record is read at once, before any
    // other call that could overwrite it.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return Err(BenchError::ServerStart {
            what: "postgres".into(),
            detail: "running as root and there is no `postgres` system user to run PostgreSQL \
                     as (PostgreSQL refuses root; install the postgresql package)"
                .into(),
        });
    }
    // SAFETY: pw is non-null and points at libc's static passwd record.
    Ok(unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

fn chown_tree(path: &Path, uid: u32, gid: u32) -> Result<()> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
    if path.is_dir() {
        for entry in std::fs::read_dir(path)? {
            chown_tree(&entry?.path(), uid, gid)?;
        }
    }
    Ok(())
}

/// Runs an initialisation command; its output goes to `log`.
fn run_init(binary: &Path, args: &[String], run_as: Option<(u32, u32)>, log: &Path) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let out = std::fs::File::create(log)?;
    let err = out.try_clone()?;
    let mut cmd = Command::new(binary);
    cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
    if let Some((uid, gid)) = run_as {
        cmd.uid(uid).gid(gid).env("HOME", "/tmp");
    }
    let status = cmd.status().map_err(|e| BenchError::ServerStart {
        what: binary.display().to_string(),
        detail: e.to_string(),
    })?;
    if !status.success() {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(6).collect();
        return Err(BenchError::ServerStart {
            what: binary.display().to_string(),
            detail: format!(
                "initialisation failed ({status}): {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ),
        });
    }
    Ok(())
}

/// Initialises a data directory under `dir` and returns how to start the server on `port`.
/// `memory` is the buffer pool / block cache / shared_buffers size in bytes.
pub fn prepare(spec: &TargetSpec, dir: &Path, port: u16, memory: u64) -> Result<DbLaunch> {
    let data = dir.join("data");
    let degree = spec.degree.clone().unwrap_or_default();
    let arg = |s: &str| s.to_string();
    match spec.kind {
        TargetKind::Postgres => {
            let initdb = need("initdb", "postgresql")?;
            let postgres = need("postgres", "postgresql")?;
            // SAFETY: geteuid has no preconditions.
            let run_as = if unsafe { libc::geteuid() } == 0 {
                let (uid, gid) = postgres_user()?;
                chown_tree(dir, uid, gid)?;
                Some((uid, gid))
            } else {
                None
            };
            let d = data.display().to_string();
            run_init(
                &initdb,
                &[
                    arg("-D"),
                    d.clone(),
                    arg("-U"),
                    arg(super::postgres::USER),
                    arg("--auth=trust"),
                    arg("--no-sync"),
                    arg("-E"),
                    arg("UTF8"),
                    arg("--locale=C"),
                ],
                run_as,
                &dir.join("init.log"),
            )?;
            let shared_kb = memory.max(MIN_PG_MEMORY) / 1024;
            let args = vec![
                arg("-D"),
                d.clone(),
                arg("-p"),
                port.to_string(),
                arg("-k"),
                dir.display().to_string(),
                arg("-c"),
                arg("listen_addresses=127.0.0.1"),
                arg("-c"),
                format!("synchronous_commit={degree}"),
                arg("-c"),
                arg("fsync=on"),
                arg("-c"),
                format!("shared_buffers={shared_kb}kB"),
                arg("-c"),
                format!("max_connections={}", spec.max_connections.unwrap_or(300)),
                arg("-c"),
                arg("logging_collector=off"),
            ];
            Ok(DbLaunch {
                version_output: version_of(&postgres),
                binary: postgres,
                args,
                run_as,
                ready_file: Some(data.join("postmaster.pid")),
                stop_signal: libc::SIGINT,
            })
        }
        TargetKind::Mariadb | TargetKind::Myrocks => {
            let install = need("mariadb-install-db", "mariadb-server")?;
            let mariadbd = need("mariadbd", "mariadb-server")?;
            // SAFETY: geteuid has no preconditions.
            let root = unsafe { libc::geteuid() } == 0;
            let mut init = vec![
                arg("--no-defaults"),
                format!("--datadir={}", data.display()),
                arg("--auth-root-authentication-method=normal"),
                arg("--skip-test-db"),
            ];
            if root {
                init.push(arg("--user=root"));
            }
            run_init(&install, &init, None, &dir.join("init.log"))?;
            let relaxed = degree.starts_with("relaxed");
            let memory = memory.max(MIN_MARIADB_MEMORY);
            let mut args = vec![
                arg("--no-defaults"),
                format!("--datadir={}", data.display()),
                format!("--socket={}", dir.join("mariadbd.sock").display()),
                format!("--pid-file={}", dir.join("mariadbd.pid").display()),
                format!("--port={port}"),
                arg("--bind-address=127.0.0.1"),
                arg("--skip-grant-tables"),
                arg("--skip-name-resolve"),
                format!("--max-connections={}", spec.max_connections.unwrap_or(500)),
                arg("--innodb-flush-method=O_DIRECT"),
            ];
            if root {
                args.push(arg("--user=root"));
            }
            if relaxed {
                args.push(arg("--skip-log-bin"));
            } else {
                args.push(format!("--log-bin={}", data.join("binlog").display()));
                args.push(arg("--server-id=1"));
                args.push(arg("--sync-binlog=1"));
            }
            // relaxed: written to the OS at commit, synced once a second; relaxed0: written and
            // synced once a second.
            let flush = match degree.as_str() {
                "relaxed0" => "0",
                "relaxed" => "2",
                _ => "1",
            };
            if spec.kind == TargetKind::Myrocks {
                args.extend([
                    arg("--plugin-load-add=ha_rocksdb"),
                    arg("--default-storage-engine=rocksdb"),
                    format!("--rocksdb-flush-log-at-trx-commit={flush}"),
                    format!("--rocksdb-block-cache-size={memory}"),
                    arg("--rocksdb-use-direct-reads=ON"),
                    // InnoDB holds only the system tables here.
                    format!("--innodb-buffer-pool-size={MIN_MARIADB_MEMORY}"),
                ]);
            } else {
                args.extend([
                    format!("--innodb-flush-log-at-trx-commit={flush}"),
                    format!("--innodb-buffer-pool-size={memory}"),
                ]);
            }
            Ok(DbLaunch {
                version_output: version_of(&mariadbd),
                binary: mariadbd,
                args,
                run_as: None,
                ready_file: None,
                stop_signal: libc::SIGTERM,
            })
        }
        other => Err(BenchError::Input(format!(
            "{other:?} is not a database server"
        ))),
    }
}

/// True once `file` (PostgreSQL's `postmaster.pid`) reports the server ready.
pub fn ready_file_says_ready(file: &Path) -> bool {
    std::fs::read_to_string(file)
        .map(|t| t.lines().any(|l| l.trim() == "ready"))
        .unwrap_or(false)
}
