//! The one error type of the log layer, [`LogError`].
//!
//! Every fallible function of this crate returns it; the server converts it at its own edge.
//! I/O errors carry the operation and the path, corruption carries the file and the byte
//! offset, and a poisoned log carries the reason (the failed fsync) for as long as it lives.

use std::io;
use std::path::PathBuf;

use crate::Lsn;

/// Errors of the write-ahead log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// An operation on a file or directory failed.
    #[error("log i/o error: {op} {path}: {source}")]
    Io {
        /// What was being done (`"create"`, `"sync_dir"`, ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A log file is damaged somewhere recovery may not skip (anything but the torn tail of
    /// the last segment), or records are missing between a snapshot and the log.
    #[error("corrupt log file {file} at offset {offset}: {reason}")]
    Corrupt {
        /// The damaged file.
        file: PathBuf,
        /// Byte offset of the first damaged byte (or of the file start for a missing range).
        offset: u64,
        /// What is wrong.
        reason: String,
    },

    /// A file was written by a format version this build does not read.
    #[error("log file {file} has format version {version}, this build reads version {supported}")]
    UnsupportedVersion {
        /// The file.
        file: PathBuf,
        /// The version found in its header.
        version: u32,
        /// The version this build writes and reads.
        supported: u32,
    },

    /// The function recovered records were handed to ([`crate::Log::open_streaming`]) failed.
    #[error("applying the recovered log failed: {0}")]
    Apply(String),

    /// The source of a snapshot's items failed before the last item ([`crate::Log::write_snapshot_from`]):
    /// nothing was renamed or removed.
    #[error("the snapshot's items could not be read: {0}")]
    SnapshotSource(String),

    /// An fsync (or a write) of the log failed earlier; the log accepts no more records and
    /// the durable LSN will not move again. Never cleared: reopen the log to continue.
    #[error("log poisoned: {0}")]
    Poisoned(String),

    /// The writer cannot write just now (the disk is full; it retries, see
    /// [`crate::Log::stalled`]): a wait for durability ends with this instead of blocking for
    /// as long as the disk stays full. The records are kept and written once there is room.
    #[error("log cannot write: {0}")]
    Stalled(String),

    /// The log was closed.
    #[error("log is closed")]
    Closed,

    /// A payload (or snapshot item) is larger than the format allows.
    #[error("record of {len} bytes is over the {max}-byte limit")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit ([`crate::format::MAX_RECORD_LEN`]).
        max: usize,
    },

    /// [`crate::Durability::None`] was passed to `append`: such writes are never logged.
    #[error("durability `none` is never logged")]
    NotLogged,

    /// An LSN beyond the last appended record was given (to `wait_durable` or a snapshot).
    #[error("lsn {lsn} is beyond the last appended lsn {last}")]
    LsnOutOfRange {
        /// The LSN asked for.
        lsn: Lsn,
        /// The last LSN appended so far.
        last: Lsn,
    },

    /// A string that is not a durability degree.
    #[error("unknown durability `{0}` (expected none, lazy, background, strict or replicated)")]
    UnknownDurability(String),
}

impl LogError {
    /// Wraps an I/O error with the operation and path it happened on.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> LogError {
        LogError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// A closure for `map_err` that wraps an I/O error with its operation and path.
    pub(crate) fn io_at<'a>(
        op: &'static str,
        path: &'a std::path::Path,
    ) -> impl FnOnce(io::Error) -> LogError + 'a {
        move |source| LogError::io(op, path, source)
    }
}
