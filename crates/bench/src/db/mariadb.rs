//! MariaDB session store (InnoDB, or RocksDB for `myrocks`), as Moodle's `mysqli`/`mariadb`
//! driver and database session handler use it: `GET_LOCK(name, timeout)` on the page's
//! connection (the server parks the waiter), read the row, write it back with an upsert in
//! autocommit (one commit — and with the durable configuration one redo-log flush and one
//! binary-log sync — per page), `RELEASE_LOCK(name)`. Uses `mysql_async` (prepared statements,
//! cached per connection); knows nothing about workloads.

use bytes::Bytes;
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Value};

use crate::db::{lock_number, now_s};
use crate::error::{BenchError, Result};
use crate::target::{ClientConfig, ServerReport};

/// The database holding the tables.
pub const DATABASE: &str = "gradus";

fn map_err(e: mysql_async::Error) -> BenchError {
    match e {
        mysql_async::Error::Server(s) => {
            BenchError::Server(format!("mariadb {} ({}): {}", s.code, s.state, s.message))
        }
        // Driver and I/O failures leave the connection unusable: the run loop reconnects.
        mysql_async::Error::Io(_) => BenchError::Closed,
        mysql_async::Error::Driver(d) => BenchError::Protocol(format!("mariadb driver: {d}")),
        other => BenchError::Protocol(format!("mariadb: {other}")),
    }
}

/// The named lock of one session (names are limited to 64 characters).
fn lock_name(sid: &str) -> String {
    format!("gradus-session-{:016x}", lock_number(sid))
}

/// One MariaDB connection.
pub struct MyConn {
    conn: mysql_async::Conn,
    lock_wait: std::time::Duration,
}

impl MyConn {
    /// Connects over TCP as `root` (the tool's own server runs with `--skip-grant-tables`).
    pub async fn connect(addr: &str, config: &ClientConfig) -> Result<MyConn> {
        let (host, port) = addr.rsplit_once(':').ok_or_else(|| {
            BenchError::Input(format!("mariadb address {addr:?}: expected host:port"))
        })?;
        let port: u16 = port
            .parse()
            .map_err(|_| BenchError::Input(format!("mariadb address {addr:?}: bad port")))?;
        let opts = mysql_async::OptsBuilder::default()
            .ip_or_hostname(host.to_string())
            .tcp_port(port)
            .user(Some("root"))
            .prefer_socket(false)
            .stmt_cache_size(64);
        let conn = tokio::time::timeout(config.op_timeout, mysql_async::Conn::new(opts))
            .await
            .map_err(|_| BenchError::Timeout(config.op_timeout, "mariadb connect"))?
            .map_err(|e| BenchError::Connect {
                addr: addr.to_string(),
                detail: e.to_string(),
            })?;
        Ok(MyConn {
            conn,
            lock_wait: config.lock_wait,
        })
    }

    /// Creates the database and tables (engine: the server's default, InnoDB or RocksDB).
    pub async fn create_schema(&mut self) -> Result<()> {
        for sql in [
            format!("CREATE DATABASE IF NOT EXISTS {DATABASE}"),
            format!(
                "CREATE TABLE IF NOT EXISTS {DATABASE}.sessions (sid VARBINARY(128) PRIMARY KEY, \
                 sessdata LONGBLOB, timecreated BIGINT NOT NULL, timemodified BIGINT NOT NULL)"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {DATABASE}.cache (k VARBINARY(255) PRIMARY KEY, \
                 v LONGBLOB NOT NULL)"
            ),
        ] {
            self.conn.query_drop(sql).await.map_err(map_err)?;
        }
        Ok(())
    }

    /// `GET_LOCK`, then the row.
    pub async fn session_open(&mut self, sid: &str) -> Result<Option<Bytes>> {
        let got: Option<Option<i64>> = self
            .conn
            .exec_first(
                "SELECT GET_LOCK(?, ?)",
                (lock_name(sid), self.lock_wait.as_secs_f64()),
            )
            .await
            .map_err(map_err)?;
        match got.flatten() {
            Some(1) => {}
            Some(_) => return Err(BenchError::LockTimeout(self.lock_wait)),
            None => return Err(BenchError::Server("GET_LOCK returned NULL".into())),
        }
        self.session_read(sid).await
    }

    /// The row, unlocked.
    pub async fn session_read(&mut self, sid: &str) -> Result<Option<Bytes>> {
        let row: Option<Option<Vec<u8>>> = self
            .conn
            .exec_first(
                format!("SELECT sessdata FROM {DATABASE}.sessions WHERE sid = ?"),
                (sid,),
            )
            .await
            .map_err(map_err)?;
        Ok(row.flatten().map(Bytes::from))
    }

    /// Upsert (autocommit), then `RELEASE_LOCK`.
    pub async fn session_close(&mut self, sid: &str, data: &[u8]) -> Result<()> {
        let now = now_s();
        self.conn
            .exec_drop(
                format!(
                    "INSERT INTO {DATABASE}.sessions (sid, sessdata, timecreated, timemodified) \
                     VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE sessdata = VALUES(sessdata), \
                     timemodified = VALUES(timemodified)"
                ),
                (sid, data, now, now),
            )
            .await
            .map_err(map_err)?;
        let _released: Option<Option<i64>> = self
            .conn
            .exec_first("SELECT RELEASE_LOCK(?)", (lock_name(sid),))
            .await
            .map_err(map_err)?;
        Ok(())
    }

    /// Rows of `table` (`sessions` or `cache`) for `keys`, in request order (one `IN` query).
    pub async fn rows_by_key(
        &mut self,
        table: &str,
        keys: &[String],
    ) -> Result<Vec<Option<Bytes>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let (kcol, vcol) = if table == "sessions" {
            ("sid", "sessdata")
        } else {
            ("k", "v")
        };
        let marks = vec!["?"; keys.len()].join(", ");
        let sql =
            format!("SELECT {kcol}, {vcol} FROM {DATABASE}.{table} WHERE {kcol} IN ({marks})");
        let params = Params::Positional(keys.iter().map(|k| Value::from(k.as_str())).collect());
        let rows: Vec<(Vec<u8>, Option<Vec<u8>>)> =
            self.conn.exec(sql, params).await.map_err(map_err)?;
        // A multi-get may name a key twice (popular keys): every occurrence gets the value.
        let found: std::collections::HashMap<Vec<u8>, Bytes> = rows
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, Bytes::from(v))))
            .collect();
        Ok(keys
            .iter()
            .map(|k| found.get(k.as_bytes()).cloned())
            .collect())
    }

    /// Multi-row upsert.
    pub async fn upsert(&mut self, table: &str, rows: &[(String, &[u8])]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let marks = vec!["(?, ?)"; rows.len()].join(", ");
        let sql = format!(
            "INSERT INTO {DATABASE}.{table} (k, v) VALUES {marks} ON DUPLICATE KEY UPDATE v = VALUES(v)"
        );
        let mut values = Vec::with_capacity(rows.len() * 2);
        for (k, v) in rows {
            values.push(Value::from(k.as_str()));
            values.push(Value::from(*v));
        }
        // A one-off statement: sent as text so the per-connection statement cache keeps the
        // statements of the page path.
        self.conn
            .exec_drop(sql, Params::Positional(values))
            .await
            .map_err(map_err)
    }

    /// `VERSION()` and the variables that matter for the study.
    pub async fn describe(&mut self) -> Result<ServerReport> {
        let version: Option<String> = self
            .conn
            .query_first("SELECT VERSION()")
            .await
            .map_err(map_err)?;
        let version = version.unwrap_or_default();
        let config: Vec<(String, String)> = self
            .conn
            .query(
                "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('innodb_flush_log_at_trx_commit', \
                 'log_bin', 'sync_binlog', 'binlog_format', 'innodb_buffer_pool_size', \
                 'innodb_flush_method', 'innodb_log_file_size', 'innodb_doublewrite', \
                 'default_storage_engine', 'rocksdb_flush_log_at_trx_commit', \
                 'rocksdb_block_cache_size', 'rocksdb_use_direct_reads', 'max_connections', \
                 'datadir', 'version_comment')",
            )
            .await
            .map_err(map_err)?;
        Ok(ServerReport {
            protocol_version: version.clone(),
            info: vec![("version".into(), version)],
            config,
        })
    }
}
