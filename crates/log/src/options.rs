//! [`LogOptions`]: where the log lives and the timing knobs of the durability degrees.
//!
//! Plain data with documented defaults; the server's config file maps onto it. Nothing here
//! touches the disk.

use std::path::PathBuf;
use std::time::Duration;

/// Options for [`crate::Log::open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogOptions {
    /// Directory holding the segment and snapshot files (created if missing).
    pub dir: PathBuf,
    /// A segment is closed and a new one started once its records would grow past this many
    /// bytes (a single record larger than this still goes whole into one segment). While
    /// zero fill is on (see `zero_fill_window`), segment files are zero-filled ahead of their
    /// records, 4 MiB at a time, up to this size (see the crate docs). Default 64 MiB.
    pub segment_bytes: u64,
    /// `lazy` records are handed to the OS at least this often, in milliseconds. Default 1000.
    pub lazy_flush_ms: u64,
    /// An fsync covering a `background` record happens within this many milliseconds of its
    /// append. Default 10.
    pub background_fsync_ms: u64,
    /// Queued record bytes that make the writer hand the queue to the OS before the lazy
    /// deadline. Default 1 MiB.
    pub buffer_bytes: usize,
    /// Back-pressure: an append waits while this many bytes are queued and not yet taken by the
    /// writer (the disk is slower than the writes), so memory stays bounded. Default 64 MiB.
    pub max_queue_bytes: usize,
    /// After an fsync that a `strict` record asked for, the writer thread watches for the next
    /// record this long before it goes to sleep: the released writers' next writes usually
    /// arrive within a round trip, and catching them awake saves them a thread wake-up before
    /// their fsync can start. Spends up to this much CPU once per strict commit; zero turns it
    /// off. Default 100 µs.
    pub strict_linger: Duration,
    /// Segments are zero-filled ahead of their records while a commit that someone waits for
    /// (a `strict` record or a `sync_now`) happened within this window, and not otherwise.
    /// `Duration::MAX`: always, including the segment started at open (the default: records
    /// that overwrite zeros in place cost less than appends that grow the file, for every
    /// degree, most of all with direct I/O; see the crate docs); `Duration::ZERO`: never.
    pub zero_fill_window: Duration,
    /// Repair mode: where recovery would stop with [`crate::LogError::Corrupt`] (damage in a
    /// segment other than the last, or a missing range), keep the valid prefix instead: the
    /// damaged segment is cut at its last valid record and every later segment is renamed to
    /// `<name>.corrupt` (kept for inspection, never read again). Default false.
    pub repair: bool,
    /// When a write finds the disk full (`ENOSPC`, `EDQUOT`), the writer tries it again this
    /// often until it succeeds (meanwhile [`crate::Log::stalled`] says why). Default 1 s.
    pub disk_full_retry: Duration,
}

impl LogOptions {
    /// Default segment size: 64 MiB.
    pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;
    /// Default lazy flush interval: 1 s.
    pub const DEFAULT_LAZY_FLUSH_MS: u64 = 1000;
    /// Default background fsync bound: 10 ms.
    pub const DEFAULT_BACKGROUND_FSYNC_MS: u64 = 10;
    /// Default strict linger: 100 µs.
    pub const DEFAULT_STRICT_LINGER: Duration = Duration::from_micros(100);
    /// Default zero fill window: always.
    pub const DEFAULT_ZERO_FILL_WINDOW: Duration = Duration::MAX;
    /// Default retry interval while the disk is full: 1 s.
    pub const DEFAULT_DISK_FULL_RETRY: Duration = Duration::from_secs(1);
    /// Default lazy buffer: 1 MiB.
    pub const DEFAULT_BUFFER_BYTES: usize = 1 << 20;

    /// Options with every default, for the log in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> LogOptions {
        LogOptions {
            dir: dir.into(),
            segment_bytes: Self::DEFAULT_SEGMENT_BYTES,
            lazy_flush_ms: Self::DEFAULT_LAZY_FLUSH_MS,
            background_fsync_ms: Self::DEFAULT_BACKGROUND_FSYNC_MS,
            buffer_bytes: Self::DEFAULT_BUFFER_BYTES,
            max_queue_bytes: 64 << 20,
            strict_linger: Self::DEFAULT_STRICT_LINGER,
            zero_fill_window: Self::DEFAULT_ZERO_FILL_WINDOW,
            repair: false,
            disk_full_retry: Self::DEFAULT_DISK_FULL_RETRY,
        }
    }
}
