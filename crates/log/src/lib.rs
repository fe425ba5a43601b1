//! Gradus write-ahead log: one ordered log of opaque records, made durable by group commit,
//! compacted by snapshots, and read back by recovery after a restart or a crash.
//!
//! The server hands this crate opaque [`bytes::Bytes`] payloads (one payload = one atomic unit,
//! e.g. a whole `MULTI`/`EXEC`) together with a [`Durability`] degree, and gets back a log
//! sequence number ([`Lsn`]) at once. What a payload means is none of this crate's business: it
//! must not depend on the store or server crates, on sockets, or on any command syntax.
//!
//! Modules, from the outside in:
//! - [`log`]: the [`Log`] handle: `append`, `wait_durable`, `sync_now`, snapshots, stats, close;
//! - `writer` (private): the writer thread: batching, group commit, segment rotation, poisoning;
//! - [`recovery`]: newest valid snapshot + the records after it; torn-tail truncation;
//! - [`format`](mod@format): the on-disk format (segment and snapshot files), pure encode/decode;
//! - [`storage`]: the [`Storage`] trait every file operation goes through, and [`OsStorage`];
//! - [`sim`]: [`SimStorage`], an in-memory disk that can crash, tear writes and fail fsyncs;
//! - [`options`], [`stats`], [`error`]: [`LogOptions`], [`LogStats`], [`LogError`].
//!
//! Ordering promise (the same one Redis writes down in `beforeSleep`): a record is appended to
//! the log, the log is fsynced, and only then is a `strict` reply released — the server does
//! the releasing, by awaiting [`Log::wait_durable`] before it writes the reply.
//!
//! Why segments are zero-filled: an `fdatasync` after *appending* to a file must also commit
//! the file's new size and extents, which on ext4 means a journal commit; after *overwriting*
//! bytes that were already written, it flushes the data alone. Measured on the development
//! machine's ext4 virtio disk (a loop of write + `fdatasync`), appending cost about 150 µs per
//! fsync for 1 KiB writes and 430 µs for 600 KB writes; overwriting a zero-filled file cost
//! about 100 µs and 200 µs, with about half the CPU. `fallocate` does not help: on ext4 it
//! leaves unwritten extents, and converting them on the first write still costs a journal
//! commit for large writes. So, like PostgreSQL with its zero-filled WAL segments, the writer
//! writes real zeros a few MiB ahead of the records ([`StorageFile::preallocate`]), the records
//! overwrite them, and only one fsync per zero-filled chunk carries a size change. Recovery
//! reads zeros after the last record as unused space, not as a torn tail ([`recovery`]).
//! The zero fill writes every byte of the log twice, though. Through the page cache that had
//! cost 4 KiB `background` session writes about 4–5 µs of CPU each, for fsyncs nobody waits
//! for, so the writer can zero-fill only while `strict` commits (or `sync_now` calls) are being
//! made ([`LogOptions::zero_fill_window`]) and plainly append otherwise. With direct I/O the
//! fill costs little CPU (zeros go from a static buffer to the device) while appends that grow
//! the file cost every degree: 1 KiB `background` SETs ran at 0.90× `none` with appends and
//! 1.02× with the fill at one connection (ten interleaved rounds), 0.77× and 0.88× at 8. So
//! the default is to zero-fill always.
//!
//! A large payload (512 bytes or more) goes to the OS straight from the buffer the server
//! handed over, in one vectored write with the record headers
//! ([`StorageFile::append_vectored`]), instead of being copied into a write buffer first.

pub mod error;
pub mod format;
pub mod log;
pub mod options;
pub mod recovery;
pub mod sim;
pub mod stats;
pub mod storage;
mod waiters;
mod writer;

use std::fmt;
use std::str::FromStr;

pub use error::LogError;
pub use log::{Appended, Log};
pub use options::LogOptions;
pub use recovery::{Recovered, RecoveryBatch, RecoverySink};
pub use sim::{CrashMode, SimStorage};
pub use stats::LogStats;
pub use storage::{OsStorage, Storage, StorageFile, DIRECT_BLOCK};

/// Log sequence number: 1-based, strictly increasing by one per appended record.
/// `0` means "nothing": the LSN before the first record.
pub type Lsn = u64;

/// How durable a write must be before its reply leaves (DESIGN.md §2), weakest to strongest.
///
/// All logged degrees share one ordered log, so making a record durable also makes every
/// earlier record durable, whatever its degree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Durability {
    /// Memory only, never logged. [`Log::append`] refuses it.
    None,
    /// Logged; handed to the OS when the buffer fills or every `lazy_flush_ms`; no fsync of its
    /// own. Survives a process crash, not a machine crash (unless a later fsync covered it).
    Lazy,
    /// Logged; an fsync covering it happens within `background_fsync_ms` of the append.
    Background,
    /// Logged; the reply waits for an fsync covering it (group commit shares that fsync).
    Strict,
    /// As `strict` in the log; the server also holds the reply until replicas have acknowledged
    /// the write (each once its own log has it). The log itself treats it as `strict`.
    Replicated,
}

impl Durability {
    /// Every degree, weakest first.
    pub const ALL: [Durability; 5] = [
        Durability::None,
        Durability::Lazy,
        Durability::Background,
        Durability::Strict,
        Durability::Replicated,
    ];

    /// The lowercase name used in configuration and commands.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::None => "none",
            Durability::Lazy => "lazy",
            Durability::Background => "background",
            Durability::Strict => "strict",
            Durability::Replicated => "replicated",
        }
    }

    /// Whether records at this degree go into the log at all.
    pub fn is_logged(self) -> bool {
        self != Durability::None
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Durability {
    type Err = LogError;

    /// Parses `none`, `lazy`, `background`, `strict` or `replicated` (ASCII case-insensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Durability::ALL
            .into_iter()
            .find(|d| d.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| LogError::UnknownDurability(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durability_round_trips_through_strings() {
        for d in Durability::ALL {
            assert_eq!(d.to_string().parse::<Durability>().unwrap(), d);
        }
        assert_eq!("STRICT".parse::<Durability>().unwrap(), Durability::Strict);
        assert!(matches!(
            "fsync".parse::<Durability>(),
            Err(LogError::UnknownDurability(s)) if s == "fsync"
        ));
        assert!(Durability::Lazy < Durability::Background);
        assert!(Durability::Background < Durability::Strict);
        assert!(Durability::Strict < Durability::Replicated);
        assert!(!Durability::None.is_logged());
    }
}
