//! The [`Storage`] trait, through which every file operation of the log goes, and
//! [`OsStorage`], its implementation on real files.
//!
//! The trait is deliberately small and spells out durability: bytes written to a file (records
//! or zero fill) are durable only after [`StorageFile::sync_data`]; a file created, renamed or
//! removed is durable only after [`Storage::sync_dir`] on its directory. The log follows those
//! rules and [`crate::SimStorage`] enforces them, so a crash test can show that nothing the log
//! called durable depended on anything else. Nothing here knows about records or LSNs.

use bytes::Bytes;
use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

/// Zero fill is written from a static buffer of this many zero bytes at a time.
const ZERO_BUF_LEN: usize = 1 << 20;
static ZEROS: [u8; ZERO_BUF_LEN] = [0; ZERO_BUF_LEN];

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
    /// and moves the logical end past it.
    fn append(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Writes the concatenation of `bufs` at the logical end of the file, as [`StorageFile::append`]
    /// would write it joined, without joining it first (one vectored write per up to 1024
    /// slices where the implementation can). The default appends the slices one by one.
    fn append_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        for buf in bufs {
            self.append(buf)?;
        }
        Ok(())
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
}

/// [`Storage`] on the real file system via `std::fs`: `fdatasync` through
/// [`File::sync_data`], directory fsync by opening the directory and calling `sync_all`.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsStorage;

struct OsFile {
    file: Arc<File>,
    /// Logical length: where the next append goes.
    len: u64,
    /// Physical size and the background fill, shared with the fill thread.
    fill: Arc<Fill>,
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
/// commit at fdatasync).
fn write_zeros(file: &File, mut from: u64, to: u64) -> io::Result<()> {
    while from < to {
        let n = (to - from).min(ZERO_BUF_LEN as u64) as usize;
        file.write_all_at(&ZEROS[..n], from)?;
        from += n as u64;
    }
    Ok(())
}

impl OsFile {
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

    fn preallocate(&mut self, physical_len: u64) -> io::Result<()> {
        let before = self.claim(physical_len)?;
        write_zeros(&self.file, before, physical_len)
    }

    fn preallocate_ahead(&mut self, physical_len: u64) -> io::Result<()> {
        let from = {
            let mut state = self.fill.state.lock();
            state.take_error()?;
            state.wanted = state.wanted.max(physical_len);
            if state.busy || physical_len <= state.physical {
                return Ok(());
            }
            state.busy = true;
            state.physical
        };
        let file = Arc::clone(&self.file);
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
                        Err(e) => state.error = Some(e),
                    }
                    fill.done.notify_all();
                    if state.error.is_some() || state.stopped {
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
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Box::new(OsFile {
            file: Arc::new(file),
            len: 0,
            fill: Arc::new(Fill::default()),
        }))
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
