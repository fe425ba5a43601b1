//! The data directory itself: its lock (`dir/LOCK`, so two servers never write one log) and its
//! `LAYOUT` file, which keeps each keyspace's global index across restarts (the text format and
//! the assignment of indices are `tenancy`'s).
//!
//! May import: `config`, `error`, `tenancy` (the layout text and the keyspace model). Must not
//! import `state`, the log, or anything that runs commands: the server calls this before either
//! exists.

use crate::config::Config;
use crate::error::ServerError;
use crate::tenancy::{parse_layout, render_layout, Tenancy};
use std::path::{Path, PathBuf};

/// Where the data directory `dir` keeps its layout.
pub fn path(dir: &Path) -> PathBuf {
    dir.join("LAYOUT")
}

/// Take an exclusive lock on `dir/LOCK` so two servers never write one log. Held for the life of
/// the process (the file handle lives in `Persistence::dir_lock`); the OS releases it on exit.
pub fn lock_data_dir(dir: &Path) -> Result<std::fs::File, ServerError> {
    std::fs::create_dir_all(dir).map_err(|e| {
        ServerError::Config(format!(
            "cannot create data directory {}: {e}",
            dir.display()
        ))
    })?;
    let path = dir.join("LOCK");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| ServerError::Config(format!("cannot open {}: {e}", path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(ServerError::Config(format!(
            "data directory {} is in use by another gradus process",
            dir.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(ServerError::Config(format!(
            "cannot lock {}: {e}",
            path.display()
        ))),
    }
}

/// The data directory's keyspace layout. A directory from before layouts existed (data but no
/// LAYOUT file) used the default tenant's databases `0..databases`.
pub fn read(config: &Config) -> Result<Vec<(usize, String)>, ServerError> {
    let path = path(&config.dir);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            parse_layout(&text).map_err(|e| ServerError::Config(format!("{}: {e}", path.display())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let has_data = std::fs::read_dir(&config.dir)?
                .filter_map(|e| e.ok())
                .any(|e| e.file_name() != "LOCK");
            Ok(if has_data {
                (0..config.databases)
                    .map(|i| (i, format!("default/{i}")))
                    .collect()
            } else {
                Vec::new()
            })
        }
        Err(e) => Err(ServerError::Config(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

/// Write LAYOUT when it changed: temp file, fsync, rename, directory fsync.
pub fn write(
    path: &Path,
    previous: &[(usize, String)],
    tenancy: &Tenancy,
) -> Result<(), ServerError> {
    let unchanged = previous.len() == tenancy.keyspaces.len()
        && previous
            .iter()
            .all(|(i, n)| tenancy.keyspaces.get(*i).is_some_and(|k| &k.full_name == n));
    if unchanged {
        return Ok(());
    }
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(render_layout(tenancy).as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
