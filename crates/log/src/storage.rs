//! The [`Storage`] trait, through which every file operation of the log goes, and
//! [`OsStorage`], its implementation on real files.
//!
//! The trait is deliberately small and spells out durability: bytes written to a file (records
//! or zero fill) are durable only after [`StorageFile::sync_data`]; a file created, renamed or
//! removed is durable only after [`Storage::sync_dir`] on its directory. The log follows those
//! rules and [`crate::SimStorage`] enforces them, so a crash test can show that nothing the log
//! called durable depended on anything else. Nothing here knows about records or LSNs.
//!
//! Log segments are written with direct I/O (`O_DIRECT`) where the file system allows it (see
//! [`OsStorage::new`]): records go from a reused, block-aligned staging buffer straight to the
//! device instead of being copied into freshly allocated page-cache pages that the fsync then
//! writes back. On a 2-core VM that copy was the log writer's largest cost (about a tenth of
//! the server's CPU with 4 KiB session writes); the device's DMA is not the CPU's work.
//! Direct writes cover whole [`DIRECT_BLOCK`]s: each write rewrites the partial last block of
//! the previous one (the same bytes where they were written before, so a write torn at any
//! sector leaves those bytes as they were) and pads its own last block with zeros, which
//! recovery reads as unused zero fill. `fdatasync` still follows and is what makes them
//! durable: a direct write may sit in the device's volatile cache until the flush.

use bytes::Bytes;
use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

/// Zero fill is written from a static buffer of this many zero bytes at a time.
const ZERO_BUF_LEN: usize = 1 << 20;

/// Zeros at a block-aligned address, so that direct I/O can write them.
#[repr(C, align(4096))]
struct Zeros([u8; ZERO_BUF_LEN]);
static ZEROS: Zeros = Zeros([0; ZERO_BUF_LEN]);

/// Direct I/O goes in blocks of this many bytes: the offset, length and buffer address of
/// every `O_DIRECT` write are multiples of it (4 KiB is a multiple of the logical block size
/// of every common device). A file written directly may hold up to this many bytes, less one,
/// of zero padding past its logical end.
pub const DIRECT_BLOCK: usize = 4096;

/// Most bytes staged for one direct write (a larger append is written in several).
const DIRECT_STAGING: usize = 4 << 20;

/// `n` rounded up to a whole number of direct I/O blocks.
fn block_ceil(n: u64) -> u64 {
    n.div_ceil(DIRECT_BLOCK as u64) * DIRECT_BLOCK as u64
}

/// A background fill publishes its progress every this many bytes (see `preallocate_ahead`).
const FILL_STEP: u64 = 256 << 10;

/// Slices per `pwritev` call (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// A file open for writing at its *logical end*.
///
/// A file has two lengths. Its *logical length* ([`StorageFile::len`]) is where the next
/// [`StorageFile::append`] goes: the end of what was appended through this handle. Its
/// *physical size* is what the file system holds and what readers see; it is at least the
/// logical length, and larger once [`StorageFile::preallocate`] has zero-filled space ahead of
/// the appends. The rules:
/// - `append` writes at the logical length, overwriting zero fill where there is some and
///   extending the file where there is not, and moves the logical length past what it wrote;
/// - `preallocate` writes real zero bytes (not holes, not `fallocate`) from the physical end
///   up to the size asked for, and leaves the logical length alone;
/// - neither is durable before `sync_data`; a crash may keep any part of what was written since
///   the last sync (in practice: earlier writes whole, the last one cut short, maybe garbage
///   right after the cut), so what follows the durable bytes may read as zeros, as a torn
///   write, or as both;
/// - readers ([`Storage::open_read`], [`Storage::read_all`]) see the whole physical file,
///   zero fill included.
pub trait StorageFile: Send {
    /// Writes all of `buf` at the logical end of the file (handed to the OS, not yet durable)
    /// and moves the logical end past it. On an error the logical end stays where it was
    /// (whatever part was written past it is written over by the next append), so the same
    /// append can be made again: the log does that when the disk was full.
    fn append(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Writes the concatenation of `bufs` at the logical end of the file, as [`StorageFile::append`]
    /// would write it joined, without joining it first (one vectored write per up to 1024
    /// slices where the implementation can), with the same rule on errors. The default joins
    /// the slices and appends them in one go.
    fn append_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        match bufs {
            [one] => self.append(one),
            _ => {
                let mut joined = Vec::with_capacity(bufs.iter().map(|b| b.len()).sum());
                bufs.iter().for_each(|b| joined.extend_from_slice(b));
                self.append(&joined)
            }
        }
    }
    /// Writes zero bytes from the current physical end of the file up to `physical_len` (does
    /// nothing if the file is already that large), without changing [`StorageFile::len`].
    /// Durable, like any written bytes, only after [`StorageFile::sync_data`].
    fn preallocate(&mut self, physical_len: u64) -> io::Result<()>;
    /// Asks for zero fill up to `physical_len` ahead of need: an implementation may write it
    /// (and fdatasync it) on another thread, so that the appends reaching it later find it
    /// written and durable and their own fsyncs flush data only. Meanwhile appends below the
    /// filled end proceed; one that would run into the fill still being written waits until
    /// the fill has written the part it needs (not for the fill's fsync).
    /// An error of a background fill is returned by a later call on this handle. The default
    /// fills at once, like [`StorageFile::preallocate`].
    fn preallocate_ahead(&mut self, physical_len: u64) -> io::Result<()> {
        self.preallocate(physical_len)
    }
    /// Makes every byte written so far (appended or zero-filled) durable (`fdatasync`). After
    /// an error the log never retries: the OS may have dropped the dirty pages and a retry
    /// could falsely succeed.
    fn sync_data(&mut self) -> io::Result<()>;
    /// Logical length of the file in bytes: the end of what was appended (including anything
    /// not yet durable), not counting zero fill past it.
    fn len(&self) -> u64;
    /// Whether appends bypass the OS page cache (direct I/O); reported in the log's stats.
    fn is_direct(&self) -> bool {
        false
    }
    /// Whether nothing was appended.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Every file and directory operation the log needs.
pub trait Storage: Send + Sync + 'static {
    /// Creates `dir` and its parents if missing.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Names (not paths) of the files directly in `dir`, in no particular order.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Creates `path` (truncating it if it exists) and opens it for appending (logical length
    /// and physical size 0). The new name is durable only after [`Storage::sync_dir`].
    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Creates `path` like [`Storage::create`], for a file whose readers take zero bytes after
    /// its contents for unused space (log segments): an implementation may then write it
    /// with direct I/O in whole blocks, leaving up to [`DIRECT_BLOCK`] − 1 zero bytes past the
    /// logical end. The default is [`Storage::create`].
    fn create_padded(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        self.create(path)
    }
    /// Opens `path` for reading from the start.
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>>;
    /// Cuts `path` to `len` bytes and makes the new length durable before returning.
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()>;
    /// Renames `from` to `to`, replacing `to` if it exists (durable after `sync_dir`).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes the file `path` (durable after `sync_dir`).
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the directory's entries (creates, renames, removes) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// Reads the whole file at `path`.
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut data = Vec::new();
        self.open_read(path)?.read_to_end(&mut data)?;
        Ok(data)
    }

    /// The whole file at `path` as shared bytes, for recovery: what [`Storage::read_all`] reads,
    /// but an implementation may map the file instead of copying it. The caller must not keep
    /// slices past the point where it truncates, renames over or removes the file's bytes it
    /// still reads (recovery only ever reads records before any cut it makes).
    fn map_all(&self, path: &Path) -> io::Result<Bytes> {
        self.read_all(path).map(Bytes::from)
    }

    /// A hint: `paths` are about to be read, in this order (recovery). An implementation may
    /// start reading them in the background so that the reads overlap with decoding. The
    /// default does nothing.
    fn prefetch(&self, paths: Vec<std::path::PathBuf>) {
        let _ = paths;
    }
}

/// [`Storage`] on the real file system via `std::fs`: `fdatasync` through
/// [`File::sync_data`], directory fsync by opening the directory and calling `sync_all`.
/// Log segments ([`Storage::create_padded`]) are written with direct I/O unless it is turned
/// off or the file system refuses it (see the module docs); the default turns it on.
#[derive(Debug, Clone, Copy)]
pub struct OsStorage {
    direct_io: bool,
}

impl Default for OsStorage {
    fn default() -> OsStorage {
        OsStorage::new(true)
    }
}

impl OsStorage {
    /// Real files. `direct_io`: write log segments with `O_DIRECT` where the file system
    /// supports it (where it does not, they are written ordinarily, with a warning).
    pub fn new(direct_io: bool) -> OsStorage {
        OsStorage { direct_io }
    }
}

fn create_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
}

/// An [`OsFile`] with nothing written, appending through `direct` if given.
fn new_os_file(file: File, direct: Option<File>) -> Box<dyn StorageFile> {
    Box::new(OsFile {
        file: Arc::new(file),
        direct: direct.map(|file| Direct {
            file: Arc::new(file),
            staging: Staging::default(),
            tail: 0,
            untried: true,
        }),
        len: 0,
        fill: Arc::new(Fill::default()),
    })
}

struct OsFile {
    file: Arc<File>,
    /// Where appends and zero fill go instead of `file` when the file is written directly.
    direct: Option<Direct>,
    /// Logical length: where the next append goes.
    len: u64,
    /// Physical size and the background fill, shared with the fill thread.
    fill: Arc<Fill>,
}

/// The direct I/O side of an [`OsFile`].
struct Direct {
    /// The same file, opened with `O_DIRECT`.
    file: Arc<File>,
    staging: Staging,
    /// The logical end is not block-aligned: the first `tail` bytes of `staging` are what the
    /// partial last block holds, written again (followed by more) by the next append.
    tail: usize,
    /// Nothing was written directly yet: a refusal (`EINVAL`) falls back to ordinary writes.
    untried: bool,
}

/// A byte buffer that starts at a [`DIRECT_BLOCK`]-aligned address and is a whole number of
/// blocks long.
#[derive(Default)]
struct Staging {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl Staging {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }

    /// Makes the buffer at least `len` bytes (rounded up to whole blocks), keeping its first
    /// `keep` bytes.
    fn grow(&mut self, len: usize, keep: usize) {
        let len = block_ceil(len as u64) as usize;
        if len <= self.len {
            return;
        }
        let raw = vec![0u8; len + DIRECT_BLOCK];
        let start = raw.as_ptr().align_offset(DIRECT_BLOCK);
        assert!(start < DIRECT_BLOCK, "cannot align a staging buffer");
        let mut grown = Staging { raw, start, len };
        grown.as_mut()[..keep].copy_from_slice(&self.as_mut()[..keep]);
        *self = grown;
    }
}

/// Whether `e` says there is no room left (`ENOSPC`; `EDQUOT` for a quota). The kind is
/// checked too: a background zero fill's error comes back re-wrapped, without its OS code.
pub(crate) fn is_disk_full(e: &std::io::Error) -> bool {
    use rustix::io::Errno;
    e.kind() == std::io::ErrorKind::StorageFull
        || e.kind() == std::io::ErrorKind::QuotaExceeded
        || [Errno::NOSPC, Errno::DQUOT]
            .iter()
            .any(|code| e.raw_os_error() == Some(code.raw_os_error()))
}

/// Zero fill state of one [`OsFile`], shared with at most one fill thread at a time.
#[derive(Default)]
struct Fill {
    state: Mutex<FillState>,
    /// Notified when a background fill ends.
    done: Condvar,
}

#[derive(Default)]
struct FillState {
    /// The file is written (records or zero fill, not necessarily durable yet) up to here;
    /// nothing at or past it is touched by the handle while a fill thread runs.
    physical: u64,
    /// A fill thread is writing zeros from `physical` onwards (and fdatasyncs them when it
    /// has written all that is `wanted`).
    busy: bool,
    /// The fill thread goes on up to here before it stops (asks made while it was busy).
    wanted: u64,
    /// What a background fill failed with, reported by the next call.
    error: Option<io::Error>,
    /// A background fill stopped for want of space. Not an error of the file: appends go on
    /// past the fill's end (extending the file, and failing on their own if there is no room),
    /// and the next [`StorageFile::preallocate_ahead`] tries the fill again.
    out_of_space: bool,
    /// The handle is being dropped: the fill thread stops after its current step.
    stopped: bool,
}

impl FillState {
    fn take_error(&mut self) -> io::Result<()> {
        match self.error.take() {
            Some(e) => Err(io::Error::new(
                e.kind(),
                format!("background zero fill: {e}"),
            )),
            None => Ok(()),
        }
    }
}

/// Writes zeros over `from..to` of `file` (ordinary writes, not fallocate: on ext4, fallocate
/// leaves unwritten extents whose conversion on the first real write still costs a journal
/// commit at fdatasync). Through a direct handle, `from` and `to` must be block-aligned.
fn write_zeros(file: &File, mut from: u64, to: u64) -> io::Result<()> {
    while from < to {
        let n = (to - from).min(ZERO_BUF_LEN as u64) as usize;
        file.write_all_at(&ZEROS.0[..n], from)?;
        from += n as u64;
    }
    Ok(())
}

impl OsFile {
    /// The handle zero fill goes through: the direct one when appends are direct (buffered and
    /// direct writes to the same blocks would make each direct write flush the page cache).
    fn fill_file(&self) -> Arc<File> {
        Arc::clone(self.direct.as_ref().map_or(&self.file, |d| &d.file))
    }

    /// A physical size asked for, in whole blocks when writing directly.
    fn physical_target(&self, physical_len: u64) -> u64 {
        if self.direct.is_some() {
            block_ceil(physical_len)
        } else {
            physical_len
        }
    }

    /// Direct append: the partial last block again, then `bufs`, then zeros to a whole block,
    /// in writes of at most [`DIRECT_STAGING`] bytes.
    fn append_direct(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let end = self.len + total;
        self.claim(block_ceil(end))?;
        let d = self.direct.as_mut().expect("a direct handle");
        let mut offset = self.len - d.tail as u64;
        let mut used = d.tail;
        let want = (used as u64 + total).min(DIRECT_STAGING as u64) as usize;
        d.staging.grow(want.max(DIRECT_BLOCK), used);
        let staging = d.staging.as_mut();
        let cap = staging.len();
        // The first `tail` bytes of `staging` are the partial last block, which an append that
        // fails after a whole staging buffer went out has overwritten: keep them to put back,
        // so that the same append can be made again (the log retries after `ENOSPC`).
        let kept_tail =
            (d.tail > 0 && used as u64 + total > cap as u64).then(|| staging[..d.tail].to_vec());
        let written = (|| {
            for buf in bufs {
                let mut rest: &[u8] = buf;
                while !rest.is_empty() {
                    let n = rest.len().min(cap - used);
                    staging[used..used + n].copy_from_slice(&rest[..n]);
                    used += n;
                    rest = &rest[n..];
                    if used == cap {
                        d.file.write_all_at(staging, offset)?;
                        d.untried = false;
                        offset += cap as u64;
                        used = 0;
                    }
                }
            }
            let padded = block_ceil(used as u64) as usize;
            if padded > 0 {
                staging[used..padded].fill(0);
                d.file.write_all_at(&staging[..padded], offset)?;
                d.untried = false;
            }
            Ok(())
        })();
        if let Err(e) = written {
            if let Some(kept) = kept_tail {
                staging[..kept.len()].copy_from_slice(&kept);
            }
            return Err(e);
        }
        let tail = used % DIRECT_BLOCK;
        staging.copy_within(used - tail..used, 0);
        d.tail = tail;
        self.len = end;
        Ok(())
    }

    /// Ordinary append through the page cache (one `pwritev` per up to `IOV_MAX` slices).
    fn append_buffered(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let end = self.len + total;
        self.claim(end)?;
        // Positional: the file cursor plays no part, so zero fill ahead of the logical end is
        // overwritten in place.
        let mut owned = bufs.to_vec();
        let mut rest = &mut owned[..];
        IoSlice::advance_slices(&mut rest, 0);
        let mut offset = self.len;
        while !rest.is_empty() {
            let n = rest.len().min(IOV_MAX);
            let written = match rustix::io::pwritev(&*self.file, &rest[..n], offset) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(written) => written,
                Err(e) if e == rustix::io::Errno::INTR => continue,
                Err(e) => return Err(e.into()),
            };
            offset += written as u64;
            IoSlice::advance_slices(&mut rest, written);
        }
        self.len = end;
        Ok(())
    }

    /// Waits for a running background fill, then claims `..end` for this handle (so no later
    /// fill starts below it). Returns the physical end before the claim.
    fn claim(&self, end: u64) -> io::Result<u64> {
        let mut state = self.fill.state.lock();
        while state.busy && end > state.physical {
            self.fill.done.wait(&mut state);
        }
        state.take_error()?;
        let before = state.physical;
        state.physical = state.physical.max(end);
        Ok(before)
    }
}

impl StorageFile for OsFile {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        self.append_vectored(&[IoSlice::new(buf)])
    }

    fn append_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        let Some(direct) = &self.direct else {
            return self.append_buffered(bufs);
        };
        let untried = direct.untried;
        match self.append_direct(bufs) {
            // A file system may accept O_DIRECT at open and refuse the writes. Nothing was
            // written yet: write ordinarily from here on.
            Err(e)
                if untried && e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) =>
            {
                tracing::warn!(error = %e, "direct I/O refused for a log file; writing it through the page cache");
                self.direct = None;
                self.append_buffered(bufs)
            }
            other => other,
        }
    }

    fn preallocate(&mut self, physical_len: u64) -> io::Result<()> {
        let physical_len = self.physical_target(physical_len);
        let before = self.claim(physical_len)?;
        write_zeros(&self.fill_file(), before, physical_len)
    }

    fn preallocate_ahead(&mut self, physical_len: u64) -> io::Result<()> {
        let physical_len = self.physical_target(physical_len);
        let from = {
            let mut state = self.fill.state.lock();
            state.take_error()?;
            if std::mem::take(&mut state.out_of_space) {
                // What was asked before and could not be written is asked again below.
                state.wanted = state.physical;
            }
            state.wanted = state.wanted.max(physical_len);
            if state.busy || physical_len <= state.physical {
                return Ok(());
            }
            state.busy = true;
            state.physical
        };
        let file = self.fill_file();
        let fill = Arc::clone(&self.fill);
        let spawned = std::thread::Builder::new()
            .name("gradus-log-fill".into())
            .spawn(move || {
                let mut from = from;
                loop {
                    // One step at a time, published as soon as it is written: an append
                    // waiting at the fill's edge waits for one step, not for the whole fill
                    // and its fsync (the zeros need not be durable for the append to go over
                    // them; only the fill must never write over an append).
                    let to = fill.state.lock().wanted.min(from + FILL_STEP);
                    let written = write_zeros(&file, from, to);
                    let mut state = fill.state.lock();
                    match written {
                        Ok(()) => state.physical = state.physical.max(to),
                        Err(e) if is_disk_full(&e) => state.out_of_space = true,
                        Err(e) => state.error = Some(e),
                    }
                    fill.done.notify_all();
                    if state.error.is_some() || state.out_of_space || state.stopped {
                        state.busy = false;
                        return;
                    }
                    if state.wanted > state.physical {
                        from = state.physical;
                        continue;
                    }
                    drop(state);
                    // All that was asked for is written: make it durable here, so the size
                    // change is committed by this fsync and the log's own fsyncs find data only.
                    let synced = file.sync_data();
                    let mut state = fill.state.lock();
                    if let Err(e) = synced {
                        state.error.get_or_insert(e);
                    }
                    if state.error.is_none() && state.wanted > state.physical {
                        // Asked for more meanwhile.
                        from = state.physical;
                        continue;
                    }
                    state.busy = false;
                    fill.done.notify_all();
                    return;
                }
            });
        if spawned.is_err() {
            // No thread: fill here instead.
            self.fill.state.lock().busy = false;
            self.fill.done.notify_all();
            return self.preallocate(physical_len);
        }
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.fill.state.lock().take_error()?;
        self.file.sync_data()
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn is_direct(&self) -> bool {
        self.direct.is_some()
    }
}

impl Drop for OsFile {
    /// A fill thread must not outlive its handle: it would go on writing zeros into a file
    /// that may since have been cut (recovery truncates the last segment to its records) or
    /// removed. It stops after the step it is writing (zeros past the records that no fsync
    /// covers are harmless: a crash leaves them or a shorter file, never other bytes).
    fn drop(&mut self) {
        let mut state = self.fill.state.lock();
        state.stopped = true;
        while state.busy {
            self.fill.done.wait(&mut state);
        }
    }
}

impl Storage for OsStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                if let Some(name) = entry.file_name().to_str() {
                    names.push(name.to_string());
                }
            }
        }
        Ok(names)
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        Ok(new_os_file(create_file(path)?, None))
    }

    fn create_padded(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let file = create_file(path)?;
        if !self.direct_io {
            return Ok(new_os_file(file, None));
        }
        use std::os::unix::fs::OpenOptionsExt;
        let direct = OpenOptions::new()
            .write(true)
            .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
            .open(path);
        match direct {
            Ok(direct) => Ok(new_os_file(file, Some(direct))),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot open a log file for direct I/O; writing it through the page cache");
                Ok(new_os_file(file, None))
            }
        }
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>> {
        Ok(Box::new(io::BufReader::new(File::open(path)?)))
    }

    /// Maps the file read-only: recovery then decodes records straight from the page cache,
    /// instead of first copying a gigabyte of log into freshly allocated memory (on a VM the
    /// kernel zeroing those new pages was most of the log-replay time).
    fn map_all(&self, path: &Path) -> io::Result<Bytes> {
        let file = File::open(path)?;
        if file.metadata()?.len() == 0 {
            return Ok(Bytes::new());
        }
        // SAFETY: the map is read-only and the data directory is locked by this process (its
        // LOCK file), so no other process changes these files. Recovery never writes into a
        // recovered segment or snapshot, and truncates a segment only past the last byte of
        // any record it keeps (see `map_all`'s contract), so no byte read through the map
        // is ever cut from the file.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        let _ = map.advise(memmap2::Advice::Sequential);
        Ok(Bytes::from_owner(map))
    }

    /// Asks the kernel to read the files ahead (`posix_fadvise(WILLNEED)`), one after the
    /// other, from a short-lived thread: log segments written with direct I/O are not in the
    /// page cache after a restart, and reading a gigabyte of them while recovery decodes
    /// (instead of page fault by page fault) roughly halves the recovery time here.
    fn prefetch(&self, paths: Vec<std::path::PathBuf>) {
        if paths.is_empty() {
            return;
        }
        let _ = std::thread::Builder::new()
            .name("gradus-log-prefetch".into())
            .spawn(move || {
                for path in paths {
                    if let Ok(file) = File::open(&path) {
                        let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::WillNeed);
                    }
                }
            });
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let file = OpenOptions::new().write(true).open(path)?;
        file.set_len(len)?;
        // The size is metadata: sync_all, not sync_data, so the shorter length is durable.
        file.sync_all()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}
