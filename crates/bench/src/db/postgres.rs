//! PostgreSQL session store, as Moodle's `pgsql` driver and database session handler use it:
//! the lock is `pg_advisory_lock(key)` on the page's connection (the server parks the waiter;
//! the wait is bounded by `lock_timeout`, as Moodle bounds it with a statement timeout), the
//! session row is read, written back with an upsert in autocommit, and the lock released with
//! `pg_advisory_unlock(key)`. Statements are prepared once per connection. Uses
//! `tokio-postgres`; knows nothing about workloads.

use bytes::Bytes;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Statement};

use crate::db::{lock_number, now_s};
use crate::error::{BenchError, Result};
use crate::target::{ClientConfig, ServerReport};

/// The superuser created by the tool's `initdb -U postgres`.
pub const USER: &str = "postgres";
/// The database the sessions and cache tables live in (created by `initdb`).
pub const DATABASE: &str = "postgres";

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS sessions (
        sid VARCHAR(128) PRIMARY KEY,
        sessdata BYTEA,
        timecreated BIGINT NOT NULL,
        timemodified BIGINT NOT NULL);
    CREATE TABLE IF NOT EXISTS cache (
        k VARCHAR(255) PRIMARY KEY,
        v BYTEA NOT NULL)";

/// Maps a driver error: lock timeouts (SQLSTATE 55P03) and broken connections keep their
/// meaning for the run loop.
fn map_err(e: tokio_postgres::Error, lock_wait: std::time::Duration) -> BenchError {
    if e.is_closed() {
        return BenchError::Closed;
    }
    if let Some(db) = e.as_db_error() {
        if db.code() == &tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE {
            return BenchError::LockTimeout(lock_wait);
        }
        return BenchError::Server(format!("postgres {}: {}", db.code().code(), db.message()));
    }
    // No server error attached: the socket failed or the stream is out of step.
    BenchError::Protocol(format!("postgres: {e}"))
}

struct Prepared {
    lock: Statement,
    unlock: Statement,
    read: Statement,
    write: Statement,
    sessions_by_key: Statement,
    cache_by_key: Statement,
}

/// One PostgreSQL connection.
pub struct PgConn {
    client: tokio_postgres::Client,
    prepared: Option<Prepared>,
    lock_wait: std::time::Duration,
    /// The background task that drives the connection's socket.
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for PgConn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl PgConn {
    /// Connects and sets the lock wait bound (`lock_timeout`); `wire` counts the bytes and
    /// round trips of the connection (the driver runs over a counting stream).
    pub async fn connect(
        addr: &str,
        config: &ClientConfig,
        wire: std::sync::Arc<crate::wire::WireCounter>,
    ) -> Result<PgConn> {
        let conninfo = format!("user={USER} dbname={DATABASE}");
        let pg_config: tokio_postgres::Config = conninfo
            .parse()
            .map_err(|e| BenchError::Input(format!("postgres connection settings: {e}")))?;
        let tcp = crate::resp::connect(addr, config.op_timeout).await?;
        let connect = pg_config.connect_raw(crate::wire::Counted::new(tcp, wire), NoTls);
        let (client, connection) = tokio::time::timeout(config.op_timeout, connect)
            .await
            .map_err(|_| BenchError::Timeout(config.op_timeout, "postgres connect"))?
            .map_err(|e| BenchError::Connect {
                addr: addr.to_string(),
                detail: match e.as_db_error() {
                    Some(db) => format!("postgres {}: {}", db.code().code(), db.message()),
                    None => e.to_string(),
                },
            })?;
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        let conn = PgConn {
            client,
            prepared: None,
            lock_wait: config.lock_wait,
            driver,
        };
        let set = format!("SET lock_timeout = {}", config.lock_wait.as_millis().max(1));
        conn.client
            .batch_execute(&set)
            .await
            .map_err(|e| map_err(e, conn.lock_wait))?;
        Ok(conn)
    }

    fn err(&self, e: tokio_postgres::Error) -> BenchError {
        map_err(e, self.lock_wait)
    }

    /// Creates the tables.
    pub async fn create_schema(&mut self) -> Result<()> {
        self.client
            .batch_execute(SCHEMA)
            .await
            .map_err(|e| map_err(e, self.lock_wait))
    }

    async fn prepared(&mut self) -> Result<&Prepared> {
        if self.prepared.is_none() {
            let c = &self.client;
            let p = async {
                Ok::<_, tokio_postgres::Error>(Prepared {
                    lock: c.prepare("SELECT pg_advisory_lock($1)").await?,
                    unlock: c.prepare("SELECT pg_advisory_unlock($1)").await?,
                    read: c
                        .prepare("SELECT sessdata FROM sessions WHERE sid = $1")
                        .await?,
                    write: c
                        .prepare(
                            "INSERT INTO sessions (sid, sessdata, timecreated, timemodified) \
                             VALUES ($1, $2, $3, $3) ON CONFLICT (sid) DO UPDATE \
                             SET sessdata = EXCLUDED.sessdata, timemodified = EXCLUDED.timemodified",
                        )
                        .await?,
                    sessions_by_key: c
                        .prepare("SELECT sid, sessdata FROM sessions WHERE sid = ANY($1)")
                        .await?,
                    cache_by_key: c.prepare("SELECT k, v FROM cache WHERE k = ANY($1)").await?,
                })
            }
            .await
            .map_err(|e| map_err(e, self.lock_wait))?;
            self.prepared = Some(p);
        }
        self.prepared
            .as_ref()
            .ok_or_else(|| BenchError::Protocol("statements not prepared".into()))
    }

    /// `pg_advisory_lock`, then the row.
    pub async fn session_open(&mut self, sid: &str) -> Result<Option<Bytes>> {
        let key = lock_number(sid);
        let lock = self.prepared().await?.lock.clone();
        self.client
            .query_one(&lock, &[&key])
            .await
            .map_err(|e| self.err(e))?;
        self.session_read(sid).await
    }

    /// The row, unlocked.
    pub async fn session_read(&mut self, sid: &str) -> Result<Option<Bytes>> {
        let read = self.prepared().await?.read.clone();
        let row = self
            .client
            .query_opt(&read, &[&sid])
            .await
            .map_err(|e| self.err(e))?;
        Ok(row
            .and_then(|r| r.get::<_, Option<Vec<u8>>>(0))
            .map(Bytes::from))
    }

    /// Upsert (one autocommit transaction), then `pg_advisory_unlock`.
    pub async fn session_close(&mut self, sid: &str, data: &[u8]) -> Result<()> {
        let (write, unlock) = {
            let p = self.prepared().await?;
            (p.write.clone(), p.unlock.clone())
        };
        let now = now_s();
        self.client
            .execute(&write, &[&sid, &data, &now])
            .await
            .map_err(|e| self.err(e))?;
        let key = lock_number(sid);
        self.client
            .query_one(&unlock, &[&key])
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Rows of `table` (`sessions` or `cache`) for `keys`, in request order.
    pub async fn rows_by_key(
        &mut self,
        table: &str,
        keys: &[String],
    ) -> Result<Vec<Option<Bytes>>> {
        let stmt = {
            let p = self.prepared().await?;
            if table == "sessions" {
                p.sessions_by_key.clone()
            } else {
                p.cache_by_key.clone()
            }
        };
        let rows = self
            .client
            .query(&stmt, &[&keys])
            .await
            .map_err(|e| self.err(e))?;
        // A multi-get may name a key twice (popular keys): every occurrence gets the value.
        let found: std::collections::HashMap<String, Bytes> = rows
            .into_iter()
            .filter_map(|r| {
                let k: String = r.get(0);
                let v: Option<Vec<u8>> = r.get(1);
                v.map(|v| (k, Bytes::from(v)))
            })
            .collect();
        Ok(keys.iter().map(|k| found.get(k).cloned()).collect())
    }

    /// Multi-row upsert into `cache`.
    pub async fn upsert(&mut self, table: &str, rows: &[(String, &[u8])]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut sql = format!("INSERT INTO {table} (k, v) VALUES ");
        let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(rows.len() * 2);
        for (i, (k, v)) in rows.iter().enumerate() {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("(${}, ${})", 2 * i + 1, 2 * i + 2));
            params.push(k);
            params.push(v);
        }
        sql.push_str(" ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v");
        self.client
            .execute(sql.as_str(), &params)
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// `version()` and the settings that matter for the study (plus every non-default one).
    pub async fn describe(&mut self) -> Result<ServerReport> {
        let version: String = self
            .client
            .query_one("SELECT version()", &[])
            .await
            .map_err(|e| self.err(e))?
            .get(0);
        let rows = self
            .client
            .query(
                "SELECT name, current_setting(name) FROM pg_settings \
                 WHERE source NOT IN ('default', 'override') OR name IN ('synchronous_commit', \
                 'fsync', 'shared_buffers', 'wal_level', 'full_page_writes', 'wal_sync_method', \
                 'commit_delay', 'max_connections', 'effective_cache_size', 'checkpoint_timeout', \
                 'max_wal_size') ORDER BY name",
                &[],
            )
            .await
            .map_err(|e| self.err(e))?;
        let config = rows
            .into_iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect();
        Ok(ServerReport {
            protocol_version: version.clone(),
            info: vec![("version".into(), version)],
            config,
        })
    }
}
