//! Database and file session stores, driven the way Moodle drives them:
//!
//! * a `sessions` table keyed by `sid` with the data as a BLOB/`bytea` and a `timemodified`
//!   column; the session lock is a named lock held on the page's own connection — MariaDB's
//!   `GET_LOCK(name, timeout)` / `RELEASE_LOCK(name)` (server-side waiting) or PostgreSQL's
//!   `pg_advisory_lock(key)` / `pg_advisory_unlock(key)` (server-side waiting, bounded by
//!   `lock_timeout`) — then read, write back (autocommit, one commit per page), unlock;
//! * the application cache in a `cache` table (`k` primary key, `v` blob), multi-gets as one
//!   `SELECT … WHERE k IN (…)` (PostgreSQL: `k = ANY($1)`), misses stored with an upsert;
//! * [`files`]: PHP's files session handler (one file per session, `flock(LOCK_EX)` held from
//!   open to close) with the cache in files too, one file per entry as Moodle's file cache
//!   store keeps it.
//!
//! [`postgres`], [`mariadb`] and [`files`] are the clients; [`launch`] knows how to create and
//! start a database in a temporary directory (the command lines and configuration recorded in
//! the result); [`sizing`] turns memory scenarios into buffer sizes. This module only speaks to stores; it measures nothing and knows no workload.

pub mod files;
pub mod launch;
pub mod mariadb;
pub mod postgres;
pub mod sizing;

use bytes::Bytes;

use crate::error::{BenchError, Result};
use crate::target::{ClientConfig, ServerReport, TargetKind};

/// Rows per multi-row insert when filling the cache or loading records.
pub const FILL_BATCH: usize = 200;

/// The cache table's key for one entry of one definition.
pub fn cache_key(definition: &str, key: &str) -> String {
    format!("{definition}/{key}")
}

/// A stable 64-bit number for a session id (PostgreSQL advisory locks take a `bigint`; Moodle
/// uses the session row's id, any stable per-session number behaves the same).
pub fn lock_number(sid: &str) -> i64 {
    // FNV-1a: stable across runs and processes.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in sid.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h as i64
}

/// Seconds since the epoch (the `timemodified` column).
pub fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// One connection to a database or file store.
pub enum DbConn {
    /// PostgreSQL.
    Postgres(postgres::PgConn),
    /// MariaDB (InnoDB or RocksDB tables).
    Mariadb(mariadb::MyConn),
    /// One file per session.
    Files(files::FilesConn),
}

impl DbConn {
    /// Connects to the store at `addr` (`127.0.0.1:port`, or a directory for `files`); `wire`
    /// counts the connection's bytes where the driver lets us wrap its socket (PostgreSQL).
    pub async fn connect(
        addr: &str,
        config: &ClientConfig,
        wire: std::sync::Arc<crate::wire::WireCounter>,
    ) -> Result<DbConn> {
        Ok(match config.kind {
            TargetKind::Postgres => {
                DbConn::Postgres(postgres::PgConn::connect(addr, config, wire).await?)
            }
            TargetKind::Mariadb | TargetKind::Myrocks => {
                DbConn::Mariadb(mariadb::MyConn::connect(addr, config).await?)
            }
            TargetKind::Files => DbConn::Files(files::FilesConn::open(addr, config)?),
            other => {
                return Err(BenchError::Input(format!(
                    "{other:?} is not a database target"
                )))
            }
        })
    }

    /// Creates the tables if they do not exist (once per target, before any point).
    pub async fn create_schema(&mut self) -> Result<()> {
        match self {
            DbConn::Postgres(c) => c.create_schema().await,
            DbConn::Mariadb(c) => c.create_schema().await,
            DbConn::Files(c) => c.create_schema(),
        }
    }

    /// Takes the session lock and reads the session (`None` for a new one).
    pub async fn session_open(&mut self, sid: &str) -> Result<Option<Bytes>> {
        match self {
            DbConn::Postgres(c) => c.session_open(sid).await,
            DbConn::Mariadb(c) => c.session_open(sid).await,
            DbConn::Files(c) => c.session_open(sid).await,
        }
    }

    /// Writes the session and releases its lock.
    pub async fn session_close(&mut self, sid: &str, data: &[u8]) -> Result<()> {
        match self {
            DbConn::Postgres(c) => c.session_close(sid, data).await,
            DbConn::Mariadb(c) => c.session_close(sid, data).await,
            DbConn::Files(c) => c.session_close(sid, data).await,
        }
    }

    /// Reads a session without locking it.
    pub async fn session_read(&mut self, sid: &str) -> Result<Option<Bytes>> {
        match self {
            DbConn::Postgres(c) => c.session_read(sid).await,
            DbConn::Mariadb(c) => c.session_read(sid).await,
            DbConn::Files(c) => c.session_read(sid),
        }
    }

    /// Reads several sessions (one query).
    pub async fn session_read_multi(&mut self, sids: &[String]) -> Result<Vec<Option<Bytes>>> {
        match self {
            DbConn::Postgres(c) => c.rows_by_key("sessions", sids).await,
            DbConn::Mariadb(c) => c.rows_by_key("sessions", sids).await,
            DbConn::Files(c) => sids.iter().map(|s| c.session_read(s)).collect(),
        }
    }

    /// Reads cache entries of one definition (one query for several).
    pub async fn cache_get_multi(
        &mut self,
        definition: &str,
        keys: &[String],
    ) -> Result<Vec<Option<Bytes>>> {
        match self {
            DbConn::Files(c) => keys.iter().map(|k| c.cache_get(definition, k)).collect(),
            other => {
                let full: Vec<String> = keys.iter().map(|k| cache_key(definition, k)).collect();
                match other {
                    DbConn::Postgres(c) => c.rows_by_key("cache", &full).await,
                    DbConn::Mariadb(c) => c.rows_by_key("cache", &full).await,
                    DbConn::Files(_) => unreachable!("handled above"),
                }
            }
        }
    }

    /// Stores (upserts) cache entries, in batches.
    pub async fn cache_put(&mut self, definition: &str, items: &[(String, Vec<u8>)]) -> Result<()> {
        match self {
            DbConn::Files(c) => {
                for (k, v) in items {
                    c.cache_put(definition, k, v)?;
                }
                Ok(())
            }
            other => {
                for chunk in items.chunks(FILL_BATCH) {
                    let rows: Vec<(String, &[u8])> = chunk
                        .iter()
                        .map(|(k, v)| (cache_key(definition, k), v.as_slice()))
                        .collect();
                    match other {
                        DbConn::Postgres(c) => c.upsert("cache", &rows).await?,
                        DbConn::Mariadb(c) => c.upsert("cache", &rows).await?,
                        DbConn::Files(_) => unreachable!("handled above"),
                    }
                }
                Ok(())
            }
        }
    }

    /// Plain records (the `kv` workload) live in the cache table under the `kv` definition.
    pub async fn kv_put(&mut self, items: &[(String, Vec<u8>)]) -> Result<()> {
        self.cache_put("kv", items).await
    }

    /// Reads one plain record.
    pub async fn kv_get(&mut self, key: &str) -> Result<Option<Bytes>> {
        let mut v = self.cache_get_multi("kv", &[key.to_string()]).await?;
        Ok(v.pop().flatten())
    }

    /// Version and configuration as the store reports them.
    pub async fn describe(&mut self) -> Result<ServerReport> {
        match self {
            DbConn::Postgres(c) => c.describe().await,
            DbConn::Mariadb(c) => c.describe().await,
            DbConn::Files(c) => Ok(c.describe()),
        }
    }
}
