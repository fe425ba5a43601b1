//! The `files` target: PHP's files session handler and Moodle's file cache store, in process.
//! A session is the file `sessions/sess_<sid>`; opening it takes `flock(LOCK_EX)` on a fresh
//! file descriptor (so two requests of one session exclude each other even in one process, as
//! two PHP workers do) and holds it until the write-back, which truncates, writes and closes
//! without fsync (PHP does not fsync either). The blocking `flock` runs on tokio's blocking
//! pool; other file operations are small and served from the page cache, so they run inline as
//! PHP would. Cache entries are one file each, `cache/<definition>/<key>`; a multi-get reads the
//! files one by one. There is no server process: the "address" is the directory.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::error::{BenchError, Result};
use crate::target::{ClientConfig, ServerReport};

/// File names may not contain `/`; keys of the bench are plain, but keep this total.
fn safe(name: &str) -> String {
    name.replace(['/', '\0'], "_")
}

/// One "connection": a view of the directory plus the session files this request has locked.
pub struct FilesConn {
    dir: PathBuf,
    held: HashMap<String, File>,
    lock_wait: std::time::Duration,
}

fn read_all(mut f: &File) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    f.seek(SeekFrom::Start(0))?;
    f.read_to_end(&mut buf)?;
    Ok(buf)
}

fn read_opt(path: &Path) -> Result<Option<Bytes>> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(Bytes::from(b))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

impl FilesConn {
    /// A view of the store rooted at `dir`.
    pub fn open(dir: &str, config: &ClientConfig) -> Result<FilesConn> {
        let dir = PathBuf::from(dir);
        if !dir.is_dir() {
            return Err(BenchError::Connect {
                addr: dir.display().to_string(),
                detail: "not a directory".into(),
            });
        }
        Ok(FilesConn {
            dir,
            held: HashMap::new(),
            lock_wait: config.lock_wait,
        })
    }

    fn session_path(&self, sid: &str) -> PathBuf {
        self.dir
            .join("sessions")
            .join(format!("sess_{}", safe(sid)))
    }

    fn cache_path(&self, definition: &str, key: &str) -> PathBuf {
        self.dir
            .join("cache")
            .join(safe(definition))
            .join(safe(key))
    }

    /// Creates the directories.
    pub fn create_schema(&mut self) -> Result<()> {
        std::fs::create_dir_all(self.dir.join("sessions"))?;
        std::fs::create_dir_all(self.dir.join("cache"))?;
        Ok(())
    }

    /// Opens (creating) the session file, waits for `flock(LOCK_EX)` and reads it; an empty
    /// file is a new session.
    pub async fn session_open(&mut self, sid: &str) -> Result<Option<Bytes>> {
        let path = self.session_path(sid);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let lock_wait = self.lock_wait;
        let (file, data) = tokio::task::spawn_blocking(move || {
            // Poll with LOCK_NB in the blocking pool so the wait stays bounded like the other
            // targets' (PHP itself would wait without bound).
            let started = std::time::Instant::now();
            loop {
                // SAFETY: flock on a descriptor we own for the duration of the call.
                let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
                if rc == 0 {
                    break;
                }
                let err = std::io::Error::last_os_error();
                if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                    return Err(BenchError::Io(err));
                }
                if started.elapsed() > lock_wait {
                    return Err(BenchError::LockTimeout(lock_wait));
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let data = read_all(&file)?;
            Ok((file, data))
        })
        .await
        .map_err(|e| BenchError::Protocol(format!("flock task: {e}")))??;
        self.held.insert(sid.to_string(), file);
        Ok((!data.is_empty()).then(|| Bytes::from(data)))
    }

    /// Truncates and writes the locked file, then closes it (which releases the lock).
    pub async fn session_close(&mut self, sid: &str, data: &[u8]) -> Result<()> {
        let mut file = self
            .held
            .remove(sid)
            .ok_or_else(|| BenchError::Input(format!("session {sid} is not locked here")))?;
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(data)?;
        drop(file);
        Ok(())
    }

    /// Reads a session file without locking.
    pub fn session_read(&self, sid: &str) -> Result<Option<Bytes>> {
        Ok(read_opt(&self.session_path(sid))?.filter(|b| !b.is_empty()))
    }

    /// Reads one cache file.
    pub fn cache_get(&self, definition: &str, key: &str) -> Result<Option<Bytes>> {
        read_opt(&self.cache_path(definition, key))
    }

    /// Writes one cache file (to a temporary name, then renamed, as Moodle's file store does).
    pub fn cache_put(&self, definition: &str, key: &str, value: &[u8]) -> Result<()> {
        let path = self.cache_path(definition, key);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp{}-{seq}", std::process::id()));
        std::fs::write(&tmp, value)?;
        std::fs::rename(&tmp, &path)?;
        Ok(())
    }

    /// What there is to say about a directory.
    pub fn describe(&self) -> ServerReport {
        ServerReport {
            protocol_version: "files".into(),
            info: vec![("dir".into(), self.dir.display().to_string())],
            config: vec![
                (
                    "session_lock".into(),
                    "flock(LOCK_EX) per session file".into(),
                ),
                ("session_fsync".into(), "no".into()),
                (
                    "cache".into(),
                    "one file per entry, written by rename".into(),
                ),
            ],
        }
    }
}
